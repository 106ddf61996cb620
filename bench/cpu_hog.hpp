// Other work on the same cores, for the benchmarks that measure how the engine shares them: busy processes started
// and stopped by the bench itself, and the cores this process got meanwhile.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

extern char** environ;

namespace actorllm::bench {

/// N busy processes (a shell loop each) beside the engine, killed when this goes out of scope.
class cpu_hog {
 public:
  explicit cpu_hog(int n) {
    for (int i = 0; i < n; ++i) {
      char sh[] = "/bin/sh", flag[] = "-c", loop[] = "while :; do :; done";
      char* argv[] = {sh, flag, loop, nullptr};
      pid_t pid = 0;
      if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv, environ) == 0)
        pids_.push_back(pid);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // running before the measurement starts
  }
  ~cpu_hog() {
    for (pid_t p : pids_)
      ::kill(p, SIGKILL);
    for (pid_t p : pids_)
      ::waitpid(p, nullptr, 0);
  }
  cpu_hog(const cpu_hog&) = delete;
  cpu_hog& operator=(const cpu_hog&) = delete;
  /// The busy processes that started (fewer than asked when posix_spawn failed).
  size_t running() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

/// CPU time this process used since construction, over the wall time: how many cores it got (beside the hog: a fair
/// share of 2 vCPUs beside 2 busy processes is 1.0 for 2 threads). Worker processes' time is not in it.
class cpu_clock {
 public:
  cpu_clock() : cpu_(process_seconds()), wall_(std::chrono::steady_clock::now()) {}
  double cores_used() const {
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_).count();
    return wall > 0 ? (process_seconds() - cpu_) / wall : 0.0;
  }

 private:
  static double process_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  double cpu_;
  std::chrono::steady_clock::time_point wall_;
};

}  // namespace actorllm::bench
