// Where tests find the shared model data and the built binary.
#pragma once

#include <filesystem>
#include <string>

namespace actorllm::test {

/// The ../shared folder beside the checkout (override with ACTORLLM_SHARED). Throws if it does not exist, so a
/// test that needs it fails loudly instead of passing vacuously.
std::filesystem::path shared_dir();

/// shared_dir()/models/<name>.
std::filesystem::path model_dir(const std::string& name);

/// Path of the built `actorllm` executable.
std::filesystem::path actorllm_binary();

/// A fresh empty directory under the system temp dir, unique per call; removed with its contents when the process
/// that made it exits normally.
std::filesystem::path make_temp_dir(const std::string& prefix);

/// Runs a shell command, returns its exit status and captures stdout (stderr goes to the test's stderr).
struct command_result {
  int status = -1;
  std::string out;
};
command_result run_command(const std::string& command);

}  // namespace actorllm::test
