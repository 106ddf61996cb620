// The periodic stats line.
#include "net/stats_logger.hpp"

#include "util/log.hpp"

#include <fmt/format.h>

#include <optional>

namespace actorllm::net {

std::string stats_line(const engine_stats& before, const engine_stats& now) {
  // A counter that went down belongs to a new engine (the workers restarted): count the interval from 0.
  auto delta = [](uint64_t a, uint64_t b) { return b >= a ? b - a : b; };
  const uint64_t queries = delta(before.prefix_cache_queries, now.prefix_cache_queries);
  const uint64_t hits = queries == 0 ? 0 : delta(before.prefix_cache_hits, now.prefix_cache_hits);
  if (now.n_running == 0 && now.n_waiting == 0 && queries == 0 && before.n_running == 0 && before.n_waiting == 0)
    return {};
  const double hit_rate = queries == 0 ? 0.0 : 100.0 * static_cast<double>(hits) / static_cast<double>(queries);
  return fmt::format("Running: {} reqs, Waiting: {} reqs, KV cache usage: {:.1f}%, Prefix cache hit rate: {:.1f}%",
                     now.n_running, now.n_waiting, 100.0 * now.kv_cache_usage, hit_rate);
}

struct stats_logger::history {
  std::mutex mutex;
  std::optional<engine_stats> before;
  bool stopped = false;  // the logger is gone: late snapshots are dropped
};

stats_logger::stats_logger(std::function<void(std::function<void(engine_stats)>)> source,
                           std::chrono::milliseconds interval)
    : source_(std::move(source)),
      interval_(interval),
      history_(std::make_shared<history>()),
      thread_([this] { run(); }) {}

stats_logger::~stats_logger() {
  {
    std::lock_guard lock{mutex_};
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
  std::lock_guard lock{history_->mutex};
  history_->stopped = true;
}

void stats_logger::run() {
  // The first snapshot is the start of the first interval, healthy or not.
  source_([h = history_](engine_stats first) {
    std::lock_guard guard{h->mutex};
    if (!h->before)
      h->before = std::move(first);
  });
  std::unique_lock lock{mutex_};
  while (!stop_cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    source_([h = history_](engine_stats now) {
      std::lock_guard guard{h->mutex};
      if (h->stopped || !now.healthy)
        return;
      if (h->before)
        if (std::string line = stats_line(*h->before, now); !line.empty())
          log::info("stats", "{}", line);
      h->before = std::move(now);
    });
    lock.lock();
  }
}

}  // namespace actorllm::net
