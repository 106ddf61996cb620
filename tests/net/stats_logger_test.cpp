// The periodic stats line: silent while idle, and the prefix cache hit rate over the interval (not since start).
#include "net/stats_logger.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

using actorllm::engine_stats;
using actorllm::net::stats_line;

TEST_CASE("stats_line reports running, waiting, KV-cache usage and the interval's prefix cache hit rate") {
  engine_stats idle;
  CHECK(stats_line(idle, idle).empty());

  engine_stats before;
  before.prefix_cache_queries = 1000;
  before.prefix_cache_hits = 900;
  engine_stats now = before;
  now.n_running = 3;
  now.n_waiting = 1;
  now.kv_cache_usage = 0.125;
  now.prefix_cache_queries = 1400;
  now.prefix_cache_hits = 1000;  // 100 of the interval's 400 tokens: 25%, not the 71% since start
  CHECK(stats_line(before, now) ==
        "Running: 3 reqs, Waiting: 1 reqs, KV cache usage: 12.5%, Prefix cache hit rate: 25.0%");

  // The interval in which the last requests finished still gets its line; the next idle one does not.
  engine_stats drained = now;
  drained.n_running = 0;
  drained.n_waiting = 0;
  drained.kv_cache_usage = 0;
  CHECK(stats_line(now, drained) ==
        "Running: 0 reqs, Waiting: 0 reqs, KV cache usage: 0.0%, Prefix cache hit rate: 0.0%");
  CHECK(stats_line(drained, drained).empty());

  // A restarted engine's counters start from 0 again: the interval counts from there.
  engine_stats restarted;
  restarted.n_running = 1;
  restarted.prefix_cache_queries = 100;
  restarted.prefix_cache_hits = 50;
  CHECK(stats_line(drained, restarted).find("Prefix cache hit rate: 50.0%") != std::string::npos);
}

TEST_CASE("stats_logger asks for snapshots from its thread and stops at once when destroyed") {
  std::atomic<int> calls{0};
  const auto t0 = std::chrono::steady_clock::now();
  {
    actorllm::net::stats_logger logger{[&calls](std::function<void(engine_stats)> done) {
                                         ++calls;
                                         done(engine_stats{});
                                       },
                                       std::chrono::hours{1}};
  }
  CHECK(calls >= 1);  // the first snapshot, asked for when it starts
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds{5});
}

TEST_CASE("stats_logger never waits for a snapshot: one that never comes holds up neither it nor its destruction") {
  std::function<void(engine_stats)> kept;  // the answer the source keeps and never gives, as a hung engine would
  std::atomic<int> calls{0};
  const auto t0 = std::chrono::steady_clock::now();
  {
    actorllm::net::stats_logger logger{[&](std::function<void(engine_stats)> done) {
                                         if (calls++ == 0)
                                           kept = std::move(done);
                                       },
                                       std::chrono::milliseconds{5}};
    while (calls < 3)  // the timer goes on asking
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds{5});
  REQUIRE(kept);
  kept(engine_stats{});  // a late answer after the logger is gone is dropped safely
}
