// Where tests find the shared model data and the built binary.
#include "support/test_paths.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string_view>
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

constexpr std::string_view temp_dir_tag = "actorllm-test-";

// The maker's pid in a make_temp_dir name (`actorllm-test-<prefix>-<pid>-<n>`), or 0 when `name` is not one.
pid_t maker_of(std::string_view name) {
  if (!name.starts_with(temp_dir_tag))
    return 0;
  const size_t counter = name.rfind('-');
  const size_t pid_at = counter == std::string_view::npos || counter == 0 ? counter : name.rfind('-', counter - 1);
  if (pid_at == std::string_view::npos || pid_at + 1 < temp_dir_tag.size())
    return 0;
  const std::string_view digits = name.substr(pid_at + 1, counter - pid_at - 1);
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return 0;
  return static_cast<pid_t>(std::stol(std::string{digits}));
}

}  // namespace

int sweep_stale_temp_dirs(const std::filesystem::path& root, std::chrono::seconds min_age) {
  int removed = 0;
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (std::filesystem::directory_iterator it{root, ec}, end; !ec && it != end; it.increment(ec)) {
    const pid_t maker = maker_of(it->path().filename().string());
    if (maker <= 0 || !it->is_directory(ec) || ec)
      continue;
    if (::kill(maker, 0) == 0 || errno != ESRCH)  // alive, or not ours to ask about: kept
      continue;
    const auto changed = std::filesystem::last_write_time(it->path(), ec);
    if (ec || now - changed < min_age) {
      ec.clear();
      continue;
    }
    if (std::filesystem::remove_all(it->path(), ec) > 0 && !ec)
      ++removed;
    ec.clear();
  }
  return removed;
}

std::filesystem::path make_temp_dir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  static std::once_flag swept;
  std::call_once(swept, [] { sweep_stale_temp_dirs(std::filesystem::temp_directory_path(), std::chrono::hours{1}); });
  auto dir = std::filesystem::temp_directory_path() /
             (std::string{temp_dir_tag} + prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
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
