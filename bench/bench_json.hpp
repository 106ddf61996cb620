// Where every benchmark's JSON results go: the file at `path` (its folders created), and a line on stderr that says
// where. A write that fails is reported and makes the benchmark exit non-zero.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace actorllm::bench {

/// Writes `json` (and a newline) to `path`. Returns the benchmark's exit status: 0, or 1 when the file cannot be
/// written.
inline int write_json_result(const std::string& path, const std::string& json) {
  const std::filesystem::path out{path};
  std::error_code ec;
  if (out.has_parent_path())
    std::filesystem::create_directories(out.parent_path(), ec);
  std::ofstream file{out};
  if (!(file << json << "\n")) {
    std::fprintf(stderr, "cannot write %s\n", out.c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return 0;
}

}  // namespace actorllm::bench
