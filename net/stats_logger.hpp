// The periodic stats line of `actorllm serve` (vLLM's LoggingStatLogger): every interval, when the engine did
// anything, one log line with the running and waiting sequences, the KV-cache usage and the prefix cache hit rate
// over the interval.
#pragma once

#include <actorllm/engine_stats.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace actorllm::net {

/// The line for the interval from `before` to `now` (two snapshots of one engine), or "" when the engine was idle
/// throughout (nothing running or waiting, no new lookups): an idle server logs nothing.
std::string stats_line(const engine_stats& before, const engine_stats& now);

/// A timer thread that asks for a snapshot every `interval` and logs stats_line when it arrives.
class stats_logger {
 public:
  /// Asks for snapshots through `source`, which starts one (LLM::stats_async) and hands it to its callback later, on
  /// any thread; the logger's thread never waits for one. The first is asked for now.
  stats_logger(std::function<void(std::function<void(engine_stats)>)> source, std::chrono::milliseconds interval);
  /// Stops the thread (at once, not after the current interval). A snapshot still on its way is dropped.
  ~stats_logger();
  stats_logger(const stats_logger&) = delete;
  stats_logger& operator=(const stats_logger&) = delete;

 private:
  struct history;  // the last healthy snapshot, shared with the callbacks still on their way
  void run();

  std::function<void(std::function<void(engine_stats)>)> source_;
  std::chrono::milliseconds interval_;
  std::shared_ptr<history> history_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace actorllm::net
