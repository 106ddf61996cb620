// The periodic stats line of `actorllm serve` (vLLM's LoggingStatLogger): every interval, when the engine did
// anything, one log line with the running and waiting sequences, the KV-cache usage and the prefix cache hit rate
// over the interval.
#pragma once

#include <actorllm/engine_stats.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace actorllm::net {

/// The line for the interval from `before` to `now` (two snapshots of one engine), or "" when the engine was idle
/// throughout (nothing running or waiting, no new lookups): an idle server logs nothing.
std::string stats_line(const engine_stats& before, const engine_stats& now);

/// A thread that logs stats_line every `interval`, reading snapshots from `source`.
class stats_logger {
 public:
  /// Starts logging; `source` is called on the logger's thread and must not throw.
  stats_logger(std::function<engine_stats()> source, std::chrono::milliseconds interval);
  /// Stops the thread (at once, not after the current interval).
  ~stats_logger();
  stats_logger(const stats_logger&) = delete;
  stats_logger& operator=(const stats_logger&) = delete;

 private:
  void run();

  std::function<engine_stats()> source_;
  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace actorllm::net
