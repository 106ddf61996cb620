// Where tests find the shared model data and the built binary.
#include "support/test_paths.hpp"

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <vector>

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

namespace {

// The directories make_temp_dir made, each removed when the process that made it exits. A forked child (a worker
// or a stand-in process of a test) inherits the list but removes only the directories it made itself.
class temp_dir_registry {
 public:
  void add(const std::filesystem::path& dir) {
    std::lock_guard lock{mutex_};
    dirs_.push_back({::getpid(), dir});
  }
  ~temp_dir_registry() {
    for (const auto& [maker, dir] : dirs_) {
      if (maker != ::getpid())
        continue;
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }

 private:
  struct made_dir {
    pid_t maker;
    std::filesystem::path dir;
  };
  std::mutex mutex_;
  std::vector<made_dir> dirs_;
};

temp_dir_registry& temp_dirs() {
  static temp_dir_registry registry;
  return registry;
}

}  // namespace

std::filesystem::path make_temp_dir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  temp_dirs().add(dir);
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
