// home_streams: each home's units as near-equal runs, walked one unit of each run a step.
#include "kernels/cpu/home_streams.hpp"

#include "util/thread_pool.hpp"

#include <doctest/doctest.h>

#include <set>
#include <stdexcept>

using actorllm::thread_pool;
using actorllm::cpu::home_streams;

TEST_CASE("home_streams: a bijection whose homes walk their runs side by side [asan]") {
  for (int homes : {1, 2, 3})
    for (int streams : {1, 2, 4})
      for (int64_t n : {0, 1, 5, 7, 80, 81}) {
        const home_streams hs(n, homes, streams);
        REQUIRE(hs.n_units() == n);
        std::set<int64_t> seen;
        for (int64_t item = 0; item < n; ++item)
          seen.insert(hs.unit_of(item));
        REQUIRE(static_cast<int64_t>(seen.size()) == n);
        if (n > 0)
          CHECK(*seen.rbegin() == n - 1);
        for (int h = 0; h < homes; ++h) {
          const int64_t begin = thread_pool::home_items_begin(n, homes, h);
          const int64_t end = thread_pool::home_items_begin(n, homes, h + 1);
          const auto& runs = hs.runs(h);
          CHECK(static_cast<int64_t>(runs.size()) == std::min<int64_t>(streams, end - begin));
          // The runs tile the home's units in order, lengths within one of each other.
          int64_t at = begin, shortest = end - begin, longest = 0;
          for (const auto& [b, e] : runs) {
            CHECK(b == at);
            at = e;
            shortest = std::min(shortest, e - b);
            longest = std::max(longest, e - b);
          }
          CHECK(at == end);
          if (!runs.empty())
            CHECK(longest - shortest <= 1);
          // Step j reads unit j of every run long enough, in run order; a step starts with its first run's unit.
          int64_t item = begin;
          for (int64_t j = 0; j < longest; ++j) {
            bool first = true;
            for (const auto& [b, e] : runs) {
              if (b + j >= e)
                continue;
              REQUIRE(item < end);
              CHECK(hs.unit_of(item) == b + j);
              CHECK(hs.starts_step(item) == first);
              first = false;
              ++item;
            }
          }
          CHECK(item == end);
        }
      }
}

TEST_CASE("home_streams::shared: one object per shape, the same as made directly [asan]") {
  const auto a = home_streams::shared(81, 2, 4);
  CHECK(a == home_streams::shared(81, 2, 4));
  CHECK(a != home_streams::shared(81, 2, 2));
  const home_streams direct(81, 2, 4);
  for (int64_t item = 0; item < 81; ++item) {
    CHECK(a->unit_of(item) == direct.unit_of(item));
    CHECK(a->starts_step(item) == direct.starts_step(item));
  }
}

TEST_CASE("home_streams refuses no home or no stream [asan]") {
  CHECK_THROWS(home_streams(8, 0, 4));
  CHECK_THROWS(home_streams(8, 2, 0));
  CHECK_THROWS(home_streams(-1, 2, 4));
}

TEST_CASE("home_first_reads: each home's runs as streams of their first tiles, within the budget [asan]") {
  // 100 units over 2 homes of 2 runs: home 0 runs [0, 25) and [25, 50), home 1 [50, 75) and [75, 100).
  const home_streams hs(100, 2, 2);
  static const char base[4096] = {};  // unit u at base + 10 u
  const size_t tile = 1000;
  auto at = [&](int64_t u) { return static_cast<const void*>(base + u * 10); };
  {
    const auto plan = actorllm::cpu::home_first_reads(hs, tile, size_t{1} << 20, at);
    REQUIRE(plan.threads.size() == 2);
    for (int h = 0; h < 2; ++h) {
      const auto& heads = plan.threads[static_cast<size_t>(h)];
      REQUIRE(heads.count == 2);
      CHECK(heads.tile_bytes == tile);
      CHECK(heads.bytes == 25 * tile);  // the longest run's tiles: the budget is larger
      for (size_t s = 0; s < 2; ++s) {
        const int64_t first = hs.runs(h)[s].first;
        REQUIRE(heads.tiles[s] == 25);
        for (int n = 0; n < 25; ++n)
          CHECK(heads.at[s][static_cast<size_t>(n)] == base + (first + n) * 10);
      }
    }
    CHECK(plan.owners.empty());  // the caller's to set
  }
  {
    // A budget under the runs' tiles: spread over the home's streams.
    const auto plan = actorllm::cpu::home_first_reads(hs, tile, 8000, at);
    const auto& heads = plan.threads[1];
    REQUIRE(heads.count == 2);
    CHECK(heads.bytes == 4000);
    CHECK(heads.at[0][0] == base + 500);  // run [50, 75)
    CHECK(heads.at[1][3] == base + 780);  // run [75, 100), its fourth unit
  }
  {
    // Runs longer than read_ahead_plan::max_tiles list only their first tiles; more streams than the plan holds
    // stop at read_ahead_plan::max_streams.
    const home_streams long_runs(400, 1, 8);
    const auto plan = actorllm::cpu::home_first_reads(long_runs, tile, size_t{1} << 30, at);
    const auto& heads = plan.threads[0];
    CHECK(heads.count == actorllm::cpu::read_ahead_plan::max_streams);
    CHECK(heads.tiles[0] == actorllm::cpu::read_ahead_plan::max_tiles);
    CHECK(heads.bytes == actorllm::cpu::read_ahead_plan::max_tiles * tile);
  }
}
