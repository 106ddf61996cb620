// Where tests find the shared model data and the built binary.
#pragma once

#include <chrono>
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

/// A fresh empty directory under the system temp dir (`actorllm-test-<prefix>-<pid>-<n>`), unique per call; removed
/// with its contents when the process that made it exits normally. The first call of a process also sweeps the
/// directories that test processes killed by a signal left behind (sweep_stale_temp_dirs).
std::filesystem::path make_temp_dir(const std::string& prefix);

/// Removes the directories under `root` named as make_temp_dir names them whose maker process no longer exists and
/// that nothing has changed for `min_age` (a live process of another pid namespace sharing the directory is not
/// removed while it works in it). Returns how many it removed; errors leave a directory in place.
int sweep_stale_temp_dirs(const std::filesystem::path& root, std::chrono::seconds min_age);

/// Runs a shell command, returns its exit status and captures stdout (stderr goes to the test's stderr).
struct command_result {
  int status = -1;
  std::string out;
};
command_result run_command(const std::string& command);

}  // namespace actorllm::test
