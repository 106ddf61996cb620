// child_process: see child_process.hpp.
#include "util/child_process.hpp"

#include <fmt/format.h>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace actorllm::util {
namespace {

/// Linux sends PR_SET_PDEATHSIG when the *thread* that forked the child ends, not the process. A child that must die
/// with this process is therefore forked from one thread that lives as long as the process: an engine that builds
/// its replicas' workers from threads of its own (a lockstep set's replicas are built at once) keeps them when those
/// threads end.
class fork_thread {
 public:
  static fork_thread& instance() {
    static fork_thread* const thread = new fork_thread;  // never destroyed: it serves until the process exits
    return *thread;
  }

  /// Runs `fork_child` (which forks, and returns the pid and fork's errno) on the fork thread; waits for it.
  std::pair<pid_t, int> run(const std::function<std::pair<pid_t, int>()>& fork_child) {
    std::packaged_task<std::pair<pid_t, int>()> task{fork_child};
    auto result = task.get_future();
    {
      std::lock_guard lock{mutex_};
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
    return result.get();
  }

 private:
  fork_thread() {
    std::thread{[this] {
      for (;;) {
        std::packaged_task<std::pair<pid_t, int>()> task;
        {
          std::unique_lock lock{mutex_};
          ready_.wait(lock, [this] { return !tasks_.empty(); });
          task = std::move(tasks_.front());
          tasks_.pop_front();
        }
        task();
      }
    }}.detach();
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<std::pair<pid_t, int>()>> tasks_;
};

}  // namespace

child_process::child_process(const options& o) {
  // Build argv and envp before fork: the child may only make async-signal-safe calls until exec.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry{*e};
    const auto eq = entry.find('=');
    const std::string_view name = entry.substr(0, eq);
    bool replaced = false;
    for (const auto& [k, v] : o.env)
      replaced = replaced || k == name;
    if (!replaced)
      env_strings.emplace_back(entry);
  }
  for (const auto& [k, v] : o.env)
    env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings;
  argv_strings.push_back(o.program);
  argv_strings.insert(argv_strings.end(), o.args.begin(), o.args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings)
    argv.push_back(s.data());
  argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  auto fork_child = [&]() -> std::pair<pid_t, int> {
    const pid_t pid = ::fork();
    if (pid != 0)
      return {pid, errno};
    if (o.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)  // the parent died between fork and prctl
        ::_exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    const char msg[] = "actorllm: exec of a child process failed\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  };
  const auto [pid, fork_errno] = o.die_with_parent ? fork_thread::instance().run(fork_child) : fork_child();
  pid_ = pid;
  if (pid_ < 0)
    throw std::runtime_error(fmt::format("cannot start {}: fork failed: {}", o.program, std::strerror(fork_errno)));
}

child_process::~child_process() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    if (::waitpid(pid_, &status, 0) == pid_)
      reap(status);
  }
}

void child_process::reap(int status) {
  if (WIFEXITED(status))
    status_ = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    status_ = 128 + WTERMSIG(status);
  else
    status_ = 255;
}

bool child_process::running() {
  if (status_ || pid_ <= 0)
    return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reap(status);
    return false;
  }
  if (r < 0 && errno == ECHILD) {
    status_ = 255;  // reaped elsewhere
    return false;
  }
  return true;
}

std::optional<int> child_process::exit_status() {
  running();
  return status_;
}

void child_process::kill(int signal) {
  if (running())
    ::kill(pid_, signal);
}

std::optional<int> child_process::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline)
      return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  return status_;
}

}  // namespace actorllm::util
