// child_process: see child_process.hpp.
#include "util/child_process.hpp"

#include <fmt/format.h>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace actorllm::util {

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
  pid_ = ::fork();
  if (pid_ < 0)
    throw std::runtime_error(fmt::format("cannot start {}: fork failed: {}", o.program, std::strerror(errno)));
  if (pid_ == 0) {
    if (o.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)  // the parent died between fork and prctl
        ::_exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    const char msg[] = "actorllm: exec of a child process failed\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
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
