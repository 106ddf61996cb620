// A progress display for long start-up work that several threads advance at once (every shard loading its weights):
// a bar redrawn in place when stderr is a terminal, and a few plain log lines when it is not (a file, a pipe, CI).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace actorllm::util {

class progress_bar {
 public:
  /// `label` heads every line ("Loading weights"); `unit` names what is counted ("bytes" are shown as MiB/GiB).
  explicit progress_bar(std::string label, bool bytes = true);
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;

  /// Adds `units` to the total still to do (each shard announces its share before it starts).
  void add_total(uint64_t units);
  /// Marks `units` as done; thread-safe and cheap (draws at most every 100 ms, or at each quarter when not a TTY).
  void advance(uint64_t units);
  /// Draws the final state once everything announced so far is done ("... 100% 2.3 GiB in 1.2 s").
  void finish_if_complete();

  /// Units announced and done so far (for tests and the start-up log).
  uint64_t total() const { return total_.load(); }
  uint64_t done() const { return done_.load(); }
  /// Whether the final line has been drawn for everything announced so far.
  bool finished() const {
    std::lock_guard lock{draw_mutex_};
    return finished_;
  }

  /// Whether the bar redraws in place (stderr is a terminal and ACTORLLM_PROGRESS is not 0).
  bool interactive() const { return interactive_; }

 private:
  void draw(uint64_t done, uint64_t total, bool final_line);

  std::string label_;
  bool bytes_;
  bool interactive_;
  std::atomic<uint64_t> total_{0};
  std::atomic<uint64_t> done_{0};
  mutable std::mutex draw_mutex_;
  std::chrono::steady_clock::time_point start_{};
  std::chrono::steady_clock::time_point last_draw_{};
  int last_quarter_ = 0;
  bool started_ = false;
  bool finished_ = false;
};

/// The process-wide "Loading weights" bar that every shard's loader advances.
progress_bar& weight_loading_progress();

}  // namespace actorllm::util
