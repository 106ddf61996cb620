// A child process the engine starts and watches (a worker of the mp executor, or one a node agent starts for the
// cluster): fork + exec with extra environment, killed with its parent (PR_SET_PDEATHSIG) when asked, reaped
// without blocking.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace actorllm::util {

class child_process {
 public:
  struct options {
    std::string program;                                   ///< path of the executable
    std::vector<std::string> args;                         ///< argv[1..]
    std::vector<std::pair<std::string, std::string>> env;  ///< added to (or replacing in) this process's environment
    bool die_with_parent = true;                           ///< SIGKILL the child when this process dies
  };

  /// Starts the child. Throws std::runtime_error naming the program when fork or exec fails.
  explicit child_process(const options& o);
  /// Kills (SIGKILL) and reaps a child that still runs.
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const { return pid_; }
  /// Whether the child still runs (reaps it when it has ended).
  bool running();
  /// The exit status once it ended: the exit code, or 128 + the signal number.
  std::optional<int> exit_status();
  /// Sends `signal` when it still runs.
  void kill(int signal);
  /// Waits up to `timeout` for the child to end; its exit status, or nullopt when it still runs.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);

 private:
  void reap(int status);
  pid_t pid_ = -1;
  std::optional<int> status_;
};

}  // namespace actorllm::util
