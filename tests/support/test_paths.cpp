// Where tests find the shared model data and the built binary.
#include "support/test_paths.hpp"

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace actorllm::test {

std::filesystem::path shared_dir() {
  const char* env = std::getenv("ACTORLLM_SHARED");
  std::filesystem::path dir = env != nullptr ? std::filesystem::path{env} : std::filesystem::path{ACTORLLM_SHARED_DIR};
  if (!std::filesystem::is_directory(dir / "models"))
    throw std::runtime_error("shared model data not found at " + dir.string() + " (set ACTORLLM_SHARED)");
  return dir;
}

std::filesystem::path model_dir(const std::string& name) { return shared_dir() / "models" / name; }

std::filesystem::path actorllm_binary() { return std::filesystem::path{ACTORLLM_BINARY}; }

std::filesystem::path make_temp_dir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

command_result run_command(const std::string& command) {
  command_result result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr)
    throw std::runtime_error("popen failed for: " + command);
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0)
    result.out.append(buf.data(), n);
  int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace actorllm::test
