// thread_pool: coverage (every index exactly once, contiguous chunks), nesting, exceptions, concurrent callers,
// the sleep/wake path and dynamic scheduling.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <time.h>

#include "util/cpu_count.hpp"
#include "util/spin_wait.hpp"
#include "util/thread_pool.hpp"

using actorllm::thread_pool;

namespace {

// Runs parallel_for(n) and checks that the chunks tile [0, n) exactly, in pool.chunks_for(n) pieces.
void check_coverage(thread_pool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(std::max<int64_t>(n, 1)));
  std::mutex m;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    {
      std::lock_guard lock(m);
      chunks.emplace_back(b, e);
    }
    for (int64_t i = b; i < e; ++i)
      hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i)
    REQUIRE(hits[static_cast<size_t>(i)].load() == 1);
  if (n == 0) {
    CHECK(chunks.empty());
    return;
  }
  CHECK(static_cast<int64_t>(chunks.size()) == pool.chunks_for(n));
  CHECK(static_cast<int64_t>(chunks.size()) ==
        (pool.size() == 1 ? std::min<int64_t>(n, 1) : std::min<int64_t>(n, 4 * pool.size())));
  std::sort(chunks.begin(), chunks.end());
  CHECK(chunks.front().first == 0);
  CHECK(chunks.back().second == n);
  for (size_t i = 0; i < chunks.size(); ++i) {
    CHECK(chunks[i].first < chunks[i].second);  // no empty chunk
    if (i > 0)
      CHECK(chunks[i - 1].second == chunks[i].first);
  }
}

}  // namespace

TEST_CASE("thread_pool parallel_for covers every index exactly once [asan]") {
  for (int size : {1, 2, 3, 4, 7}) {
    thread_pool pool(size);
    CHECK(pool.size() == size);
    for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 100, 1001, 12345})
      check_coverage(pool, n);
  }
}

TEST_CASE("thread_pool chunks run at the same time when the workers are free [asan]") {
  // Each chunk waits until all four have started: only four threads at once get past it (a pool that ran the chunks
  // one after another would time out here).
  thread_pool pool(4);
  std::atomic<int> started{0};
  std::atomic<bool> all_met{true};
  std::mutex m;
  std::set<std::thread::id> ids;
  pool.parallel_for(4, [&](int64_t, int64_t) {
    {
      std::lock_guard lock(m);
      ids.insert(std::this_thread::get_id());
    }
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (started.load() < 4) {
      if (std::chrono::steady_clock::now() > deadline) {
        all_met = false;
        return;
      }
      std::this_thread::yield();
    }
  });
  CHECK(all_met.load());
  CHECK(ids.size() == 4);
  CHECK(ids.count(std::this_thread::get_id()) == 1);
}

TEST_CASE("thread_pool: the caller takes the chunks of workers that have not started [asan]") {
  // Asleep after an idle gap, the workers wake tens of microseconds after the call begins; by then the caller has
  // finished its first chunk and takes the next unclaimed one instead of waiting. (Before chunks were claimed, the
  // caller ran chunk 0 and nothing else, however late the workers came.)
  thread_pool pool(3);
  int caller_ran_two = 0;
  for (int call = 0; call < 200 && caller_ran_two == 0; ++call) {
    std::atomic<int> by_caller{0};
    const auto caller = std::this_thread::get_id();
    pool.parallel_for(3, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() == caller)
        by_caller.fetch_add(1);
    });
    if (by_caller.load() >= 2)
      ++caller_ran_two;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(2));  // the workers go to sleep: the next call wakes them late
  }
  CHECK(caller_ran_two > 0);
}

TEST_CASE("thread_pool survives many back-to-back calls [asan]") {
  thread_pool pool(3);
  std::atomic<int64_t> total{0};
  const int calls = 20000;
  for (int c = 0; c < calls; ++c) {
    pool.parallel_for(5, [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i)
        s += i;
      total.fetch_add(s);
    });
  }
  CHECK(total.load() == int64_t{calls} * 10);
}

TEST_CASE("thread_pool wakes sleeping workers [asan]") {
  // Idle gaps longer than the spin budget put the workers to sleep; the next call must still run every chunk.
  thread_pool pool(3);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    check_coverage(pool, 9);
  }
}

TEST_CASE("thread_pool nested parallel_for runs inline [asan]") {
  thread_pool pool(3);
  std::vector<std::atomic<int>> hits(30 * 7);
  pool.parallel_for(30, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      std::thread::id outer = std::this_thread::get_id();
      pool.parallel_for(7, [&](int64_t b2, int64_t e2) {
        CHECK(std::this_thread::get_id() == outer);  // inline, no deadlock
        CHECK(b2 == 0);
        CHECK(e2 == 7);
        for (int64_t j = b2; j < e2; ++j)
          hits[static_cast<size_t>(i * 7 + j)].fetch_add(1);
      });
    }
  });
  for (auto& h : hits)
    CHECK(h.load() == 1);
}

TEST_CASE("thread_pool rethrows an exception after all chunks finished [asan]") {
  thread_pool pool(4);
  std::atomic<int> finished{0};
  CHECK_THROWS_AS(pool.parallel_for(4,
                                    [&](int64_t b, int64_t) {
                                      if (b == 2)
                                        throw std::runtime_error("chunk failed");
                                      finished.fetch_add(1);
                                    }),
                  std::runtime_error);
  CHECK(finished.load() == 3);
  // The caller's own chunk throwing must also wait for the workers, and the pool stays usable.
  CHECK_THROWS_AS(pool.parallel_for(4,
                                    [&](int64_t b, int64_t) {
                                      if (b == 0)
                                        throw std::logic_error("first chunk failed");
                                    }),
                  std::logic_error);
  check_coverage(pool, 1000);
}

TEST_CASE("thread_pool serialises calls from several outside threads [asan]") {
  thread_pool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int k = 0; k < 500; ++k)
        pool.parallel_for(10, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
    });
  }
  for (auto& t : callers)
    t.join();
  CHECK(total.load() == 3 * 500 * 10);
}

TEST_CASE("thread_pool parallel_for_dynamic covers every index exactly once [asan]") {
  for (int size : {1, 2, 4}) {
    thread_pool pool(size);
    for (int64_t n : {0, 1, 5, 64, 1000}) {
      for (int64_t grain : {1, 3, 100}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(std::max<int64_t>(n, 1)));
        pool.parallel_for_dynamic(n, grain, [&](int64_t b, int64_t e) {
          CHECK(e - b <= grain);
          for (int64_t i = b; i < e; ++i)
            hits[static_cast<size_t>(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i)
          REQUIRE(hits[static_cast<size_t>(i)].load() == 1);
      }
    }
  }
}

TEST_CASE("thread_pool parallel_for_guided hands out contiguous shrinking grains within bounds [asan]") {
  for (int size : {1, 2, 4}) {
    thread_pool pool(size);
    for (int64_t n : {0, 1, 7, 64, 1000, 4096}) {
      for (auto [lo, hi] : {std::pair<int64_t, int64_t>{1, 1}, {8, 32}, {3, 100}, {50, 10}}) {
        std::mutex m;
        std::vector<std::pair<int64_t, int64_t>> grains;
        pool.parallel_for_guided(n, lo, hi, [&](int64_t b, int64_t e) {
          const std::lock_guard lock(m);
          grains.emplace_back(b, e);
        });
        std::sort(grains.begin(), grains.end());
        const int64_t max_grain = std::max(lo, hi);  // a max below the min is the min
        int64_t covered = 0;
        for (size_t g = 0; g < grains.size(); ++g) {
          const auto [b, e] = grains[g];
          REQUIRE(b == covered);  // contiguous, each index once
          CHECK(e - b <= max_grain);
          if (e < n)
            CHECK(e - b >= lo);  // only the last grain may be short
          if (g > 0)
            CHECK(e - b <= grains[g - 1].second - grains[g - 1].first);  // claimed in order, never growing
          covered = e;
        }
        CHECK(covered == n);
        if (n >= 1000 && lo == 8 && hi == 32) {  // long grains first, short at the end
          CHECK(grains.front().second - grains.front().first == 32);
          CHECK(grains.back().second - grains.back().first <= 8);
        }
      }
    }
  }
}

namespace {

// Work for parallel_for_takeover: item i is 3 i + 1, computed into scratch and committed to `out`. It counts the
// commits per item, in memory it owns (a thread that lost its grain may still run compute() after the call). With
// `stall`, the first grain a thread other than `caller` computes blocks until release() (10 s at most), and then
// leaves wrong values in its scratch: committed, they would show.
class counting_work final : public actorllm::takeover_work {
 public:
  counting_work(int64_t n, int64_t* out, std::thread::id caller, bool stall)
      : out_(out), caller_(caller), stall_(stall), commits_(static_cast<size_t>(n)) {}

  size_t scratch_floats(int64_t n_items) const override { return static_cast<size_t>(n_items); }

  void compute(int64_t begin, int64_t end, float* scratch) const noexcept override {
    float value_offset = 0.0f;
    if (stall_ && std::this_thread::get_id() != caller_ && !stalled_.exchange(true)) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!released_.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      value_offset = 1000.0f;  // the late result, never to be committed
    } else if (std::this_thread::get_id() == caller_) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // leaves the workers time to claim grains
    }
    for (int64_t i = begin; i < end; ++i)
      scratch[i - begin] = static_cast<float>(3 * i + 1) + value_offset;
    if (value_offset != 0.0f)
      late_done_.store(true);
    if (std::this_thread::get_id() == caller_) {
      std::lock_guard lock(order_mutex_);
      caller_order_.push_back(begin);
    }
  }
  /// The first items of the grains the caller computed, in order.
  std::vector<int64_t> caller_order() const {
    std::lock_guard lock(order_mutex_);
    return caller_order_;
  }

  void commit(int64_t begin, int64_t end, const float* scratch) const noexcept override {
    for (int64_t i = begin; i < end; ++i) {
      out_[i] = static_cast<int64_t>(scratch[i - begin]);
      commits_[static_cast<size_t>(i)].fetch_add(1);
    }
  }

  bool stalled() const { return stalled_.load(); }
  bool late_done() const { return late_done_.load(); }
  void release() { released_.store(true); }
  int commits(int64_t i) const { return commits_[static_cast<size_t>(i)].load(); }

 private:
  int64_t* out_;
  std::thread::id caller_;
  bool stall_;
  mutable std::vector<std::atomic<int>> commits_;
  mutable std::atomic<bool> stalled_{false}, released_{false}, late_done_{false};
  mutable std::mutex order_mutex_;
  mutable std::vector<int64_t> caller_order_;
};

}  // namespace

TEST_CASE("thread_pool parallel_for_takeover commits every item exactly once, nested calls inline [asan]") {
  for (int size : {1, 2, 4}) {
    thread_pool pool(size);
    for (int64_t n : {0, 1, 7, 64, 1000}) {
      for (auto [lo, hi] : {std::pair<int64_t, int64_t>{1, 1}, {8, 32}, {50, 10}}) {
        std::vector<int64_t> out(static_cast<size_t>(n), -5);
        auto work = std::make_shared<counting_work>(n, out.data(), std::thread::id{}, false);
        pool.parallel_for_takeover(n, lo, hi, work);
        for (int64_t i = 0; i < n; ++i) {
          REQUIRE(out[static_cast<size_t>(i)] == 3 * i + 1);
          REQUIRE(work->commits(i) == 1);
        }
      }
    }
    // Homes of near-equal items, grains of 1, 3 and 16, without and with a tail of grains of 2 (range stealing
    // between them).
    for (int64_t n : {0, 1, 7, 64, 1000})
      for (int64_t grain : {1, 3, 16})
        for (int64_t tail : {0, 2}) {
          std::vector<int64_t> out(static_cast<size_t>(n), -5);
          auto work = std::make_shared<counting_work>(n, out.data(), std::thread::id{}, false);
          pool.parallel_for_takeover(pool.home_split(n, grain, tail), work);
          for (int64_t i = 0; i < n; ++i) {
            REQUIRE(out[static_cast<size_t>(i)] == 3 * i + 1);
            REQUIRE(work->commits(i) == 1);
          }
        }
    // From inside a chunk of the same pool: runs on the calling thread.
    std::vector<int64_t> out(100, -5);
    pool.parallel_for(1, [&](int64_t, int64_t) {
      pool.parallel_for_takeover(100, 8, 32,
                                 std::make_shared<counting_work>(100, out.data(), std::thread::id{}, false));
    });
    for (int64_t i = 0; i < 100; ++i)
      REQUIRE(out[static_cast<size_t>(i)] == 3 * i + 1);
  }
}

TEST_CASE(
    "thread_pool::home_split: each thread's near-equal items cut into grains, a tail of short ones, nothing shared "
    "[asan]") {
  // Without a tail (0) every grain of a home holds `grain` items but its last; with one, a home's last tail_items
  // (0: 2 x grain) go in grains of tail_grain (a tail longer than the grain is the grain).
  for (int size : {1, 2, 3}) {
    thread_pool pool(size);
    for (int64_t n : {0, 1, 7, 80, 352})
      for (auto [grain, tail] : {std::pair<int64_t, int64_t>{1, 0}, {16, 0}, {16, 4}, {8, 1}, {4, 4}, {4, 9}})
        for (int64_t tail_items : {0, 1, 5, 16}) {
          const actorllm::takeover_split split = pool.home_split(n, grain, tail, tail_items);
          REQUIRE(split.bounds.front() == 0);
          REQUIRE(split.bounds.back() == n);
          REQUIRE(split.home_begin.size() == static_cast<size_t>(size) + 1);
          CHECK(split.home_begin.back() == split.n_grains());  // no shared grains
          const int64_t tail_grain = tail <= 0 ? grain : std::min(tail, grain);
          for (int h = 0; h < size; ++h) {
            const auto first = static_cast<size_t>(split.home_begin[static_cast<size_t>(h)]);
            const auto last = static_cast<size_t>(split.home_begin[static_cast<size_t>(h) + 1]);
            const int64_t end = thread_pool::home_items_begin(n, size, h + 1);
            CHECK(split.bounds[first] == thread_pool::home_items_begin(n, size, h));
            CHECK(split.bounds[last] == end);
            for (size_t g = first; g < last; ++g) {
              const int64_t left = end - split.bounds[g];
              const int64_t in_tail = tail_items <= 0 ? 2 * grain : tail_items;
              CHECK(split.bounds[g + 1] - split.bounds[g] == std::min(left, left <= in_tail ? tail_grain : grain));
            }
          }
        }
  }
  {
    thread_pool pool(2);  // homes [0, 40) and [40, 80): 16, then 24 items in grains of 4
    CHECK(pool.home_split(80, 16, 4).bounds ==
          std::vector<int64_t>{0, 16, 20, 24, 28, 32, 36, 40, 56, 60, 64, 68, 72, 76, 80});
    // The same with a tail of one grain's worth: 16, 16, then 8 items in grains of 4 (as the decode kernels cut
    // theirs).
    CHECK(pool.home_split(80, 16, 4, 16).bounds == std::vector<int64_t>{0, 16, 32, 36, 40, 56, 72, 76, 80});
  }
  // The guided split: thread i's home is grain i, the rest shared.
  thread_pool pool(2);
  const actorllm::takeover_split guided = pool.guided_split(80, 8, 32);
  CHECK(guided.bounds == std::vector<int64_t>{0, 20, 35, 46, 54, 62, 70, 78, 80});
  CHECK(guided.home_begin == std::vector<int64_t>{0, 1, 2});
}

TEST_CASE(
    "thread_pool parallel_for_takeover over homes: a thread done with its home takes the back half of another's "
    "rest and reads it forward, and a stalled grain is taken over [asan]") {
  thread_pool pool(2);
  bool stalled = false;
  for (int attempt = 0; attempt < 20 && !stalled; ++attempt) {
    const int64_t n = 64;  // homes [0, 32) and [32, 64), grains of one item
    std::vector<int64_t> out(static_cast<size_t>(n), -5);
    auto work = std::make_shared<counting_work>(n, out.data(), std::this_thread::get_id(), true);
    pool.parallel_for_takeover(pool.home_split(n, 1), work);
    stalled = work->stalled();
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(out[static_cast<size_t>(i)] == 3 * i + 1);
      REQUIRE(work->commits(i) == 1);
    }
    work->release();
    if (!stalled)
      continue;
    // The caller ran its home first, in order; then, of the worker's home (which holds its stalled first grain), the
    // back half of the rest first, each stolen range in increasing order, the stalled grain last (taken over).
    const std::vector<int64_t> order = work->caller_order();
    REQUIRE(order.size() >= 32);
    for (int64_t i = 0; i < 32; ++i)
      REQUIRE(order[static_cast<size_t>(i)] == i);
    const std::vector<int64_t> stolen(order.begin() + 32, order.end());
    REQUIRE(!stolen.empty());
    CHECK(stolen.front() >= 48);
    // Runs of consecutive grains, each starting before the previous one: halves of what is left, read forward (a
    // thief scanning back from the end would make 32 runs of one).
    std::vector<int64_t> run_starts{stolen.front()};
    for (size_t i = 1; i < stolen.size(); ++i)
      if (stolen[i] != stolen[i - 1] + 1) {
        CHECK(stolen[i] < run_starts.back());
        run_starts.push_back(stolen[i]);
      }
    CHECK(run_starts.size() <= 8);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!work->late_done() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (int64_t i = 0; i < n; ++i)
      REQUIRE(work->commits(i) == 1);
  }
  CHECK(stalled);
}

TEST_CASE(
    "thread_pool parallel_for_takeover: a grain held by a stalled thread is taken over, the call returns "
    "without it, and the late result is dropped [asan]") {
  thread_pool pool(2);
  bool stalled = false;
  // A worker has to claim a grain before the caller has claimed them all; the caller's grains are slow, so it does
  // at the first attempt but for a machine too busy to run the worker at all.
  for (int attempt = 0; attempt < 20 && !stalled; ++attempt) {
    const int64_t n = 64;
    std::vector<int64_t> out(static_cast<size_t>(n), -5);
    auto work = std::make_shared<counting_work>(n, out.data(), std::this_thread::get_id(), true);
    const std::weak_ptr<counting_work> alive = work;
    pool.parallel_for_takeover(n, 4, 4, work);  // returns while the stalled grain's thread still waits for release()
    stalled = work->stalled();
    CHECK_FALSE(work->late_done());
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(out[static_cast<size_t>(i)] == 3 * i + 1);
      REQUIRE(work->commits(i) == 1);
    }
    work->release();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (stalled && !work->late_done() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(work->late_done() == stalled);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the late thread's commit attempt
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(out[static_cast<size_t>(i)] == 3 * i + 1);  // the late values (+1000) were dropped
      REQUIRE(work->commits(i) == 1);
    }
    work.reset();
    while (!alive.expired() && std::chrono::steady_clock::now() < deadline)  // the late thread lets go of the work
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(alive.expired());
  }
  CHECK(stalled);
}

namespace {

// Work for parallel_for_takeover that records which thread computed which grain (by the grain's first item) and each
// idle() call: the pool thread index, the OS thread, and whether stop() turned true within 10 s. Every compute()
// sleeps, so the worker cannot run out of grains before the caller has begun unless the OS holds the caller back.
class idle_recording_work final : public actorllm::takeover_work {
 public:
  struct idle_call {
    int thread_index;
    std::thread::id thread;
    bool stopped;
  };

  explicit idle_recording_work(int64_t n) : computed_by_(static_cast<size_t>(n)) {}

  size_t scratch_floats(int64_t n_items) const override { return static_cast<size_t>(n_items); }
  void compute(int64_t begin, int64_t, float*) const noexcept override {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    std::lock_guard lock(mutex_);
    computed_by_[static_cast<size_t>(begin)] = std::this_thread::get_id();
  }
  void commit(int64_t, int64_t, const float*) const noexcept override {}
  void idle(int thread_index, const std::function<bool()>& stop) const noexcept override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool stopped = false;
    while (!(stopped = stop()) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    std::lock_guard lock(mutex_);
    idle_calls_.push_back({thread_index, std::this_thread::get_id(), stopped});
  }

  std::thread::id computed_by(int64_t first_item) const {
    std::lock_guard lock(mutex_);
    return computed_by_[static_cast<size_t>(first_item)];
  }
  std::vector<idle_call> idle_calls() const {
    std::lock_guard lock(mutex_);
    return idle_calls_;
  }

 private:
  mutable std::mutex mutex_;
  mutable std::vector<std::thread::id> computed_by_;
  mutable std::vector<idle_call> idle_calls_;
};

}  // namespace

TEST_CASE("thread_pool::guided_split: guided grains that tile 0 to n, the same split the call makes [asan]") {
  thread_pool pool(2);
  for (int64_t n : {0, 1, 7, 80, 352}) {
    const std::vector<int64_t> g = pool.guided_split(n, 8, 32).bounds;
    REQUIRE(!g.empty());
    CHECK(g.front() == 0);
    CHECK(g.back() == n);
    for (size_t i = 1; i < g.size(); ++i) {
      CHECK(g[i] > g[i - 1]);
      CHECK(g[i] - g[i - 1] <= 32);
      if (g[i] != n)
        CHECK(g[i] - g[i - 1] >= 8);  // only the last grain may be short
    }
  }
  // 80 units over 2 threads: a quarter of what is left, 8 to 32 at a time.
  CHECK(pool.guided_split(80, 8, 32).bounds == std::vector<int64_t>{0, 20, 35, 46, 54, 62, 70, 78, 80});
  // The same split the call makes: one grain at a time as compute() sees them. The log lives in the work, which the
  // pool keeps alive: a thread whose grain was taken over may still run compute() after the call returns (on a slow
  // CI run under ASan, a log on this test's stack was written after it was gone).
  class grain_log final : public actorllm::takeover_work {
   public:
    size_t scratch_floats(int64_t n) const override { return static_cast<size_t>(n); }
    void compute(int64_t b, int64_t e, float*) const noexcept override {
      std::lock_guard lock(m_);
      seen_.emplace(b, e);
    }
    void commit(int64_t, int64_t, const float*) const noexcept override {}
    std::set<std::pair<int64_t, int64_t>> seen() const {
      std::lock_guard lock(m_);
      return seen_;
    }

   private:
    mutable std::mutex m_;
    mutable std::set<std::pair<int64_t, int64_t>> seen_;
  };
  auto log = std::make_shared<grain_log>();
  pool.parallel_for_takeover(352, 8, 32, log);
  const std::vector<int64_t> g = pool.guided_split(352, 8, 32).bounds;
  std::set<std::pair<int64_t, int64_t>> expected;
  for (size_t i = 0; i + 1 < g.size(); ++i)
    expected.emplace(g[i], g[i + 1]);
  // A late compute() repeats a grain the call already saw: the set of grains is the same.
  CHECK(log->seen() == expected);
}

TEST_CASE(
    "thread_pool parallel_for_takeover: thread i claims grain i first, and a thread with no grain left idles until "
    "the call ends (the caller) or the next call comes (a worker) [asan]") {
  thread_pool pool(2);
  const int64_t n = 64;  // 8 grains of 8
  bool pattern_seen = false;
  // The pattern needs the OS to run both threads during the call: tried a few times on a busy machine.
  for (int attempt = 0; attempt < 10 && !pattern_seen; ++attempt) {
    auto work = std::make_shared<idle_recording_work>(n);
    pool.parallel_for_takeover(n, 8, 8, work);
    // The caller's idle() ran (if at all) inside the call, and returned because every grain was in.
    for (const auto& call : work->idle_calls())
      if (call.thread == std::this_thread::get_id()) {
        CHECK(call.thread_index == 0);
        CHECK(call.stopped);
      }
    // The next call (any kind) is what stops a worker's idle().
    pool.parallel_for(8, [](int64_t, int64_t) {});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::thread::id worker;
    while (std::chrono::steady_clock::now() < deadline && worker == std::thread::id{}) {
      for (const auto& call : work->idle_calls())
        if (call.thread != std::this_thread::get_id()) {
          CHECK(call.thread_index == 1);
          CHECK(call.stopped);
          worker = call.thread;
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    pattern_seen = worker != std::thread::id{} && work->computed_by(0) == std::this_thread::get_id() &&
                   work->computed_by(8) == worker;
  }
  CHECK(pattern_seen);
}

TEST_CASE("thread_pool takeover timing: each thread's compute time and the calls, only while on [asan]") {
  thread_pool pool(2);
  auto run = [&] { pool.parallel_for_takeover(64, 8, 8, std::make_shared<idle_recording_work>(64)); };
  run();  // not timed
  pool.set_takeover_timing(true);
  thread_pool::takeover_timing t = pool.takeover_timing_totals();
  CHECK(t.calls == 0);
  REQUIRE(t.compute_ns.size() == 2);
  CHECK(t.compute_ns[0] + t.compute_ns[1] == 0);
  run();
  run();
  t = pool.takeover_timing_totals();
  CHECK(t.calls == 2);
  // 16 grains of at least 300 us each, computed once (no takeover at these times unless the machine is very busy).
  CHECK(t.compute_ns[0] + t.compute_ns[1] >= 16 * 300'000);
  CHECK(t.compute_ns[0] > 0);
  CHECK(t.call_ns >= (t.compute_ns[0] + t.compute_ns[1]) / 2);  // two threads at most
  pool.set_takeover_timing(false);
  run();
  t = pool.takeover_timing_totals();
  CHECK(t.calls == 0);
  CHECK(t.compute_ns[0] + t.compute_ns[1] == 0);
}

// Item i takes durations[i] to compute.
class timed_items_work final : public actorllm::takeover_work {
 public:
  explicit timed_items_work(std::vector<std::chrono::microseconds> durations) : durations_(std::move(durations)) {}
  size_t scratch_floats(int64_t n_items) const override { return static_cast<size_t>(n_items); }
  void compute(int64_t begin, int64_t end, float*) const noexcept override {
    for (int64_t i = begin; i < end; ++i)
      std::this_thread::sleep_for(durations_[static_cast<size_t>(i)]);
  }
  void commit(int64_t, int64_t, const float*) const noexcept override {}

 private:
  std::vector<std::chrono::microseconds> durations_;
};

TEST_CASE("thread_pool takeover timing: a call's late start and uneven end, over the threads that computed [asan]") {
  using std::chrono::microseconds;
  // One timed call of two grains of one item each, taking the given times; the pool's totals after it.
  auto timed_call = [](thread_pool& p, microseconds first, microseconds second) {
    p.set_takeover_timing(true);
    p.parallel_for_takeover(2, 1, 1, std::make_shared<timed_items_work>(std::vector{first, second}));
    return p.takeover_timing_totals();
  };
  thread_pool pool(2);
  // The caller's grain sleeps 3 ms and the worker's 4 ms; a sleep never ends early, and may run long (on this 2-vCPU
  // VM the worker's often ran 6.2 ms, while the caller spun on the same core). A thread that computed both grains took
  // at least 7 ms. Where each thread computed one grain (3-6 ms and 4-7 ms), the worker ended at least c1 - c0 after
  // the caller, less how much later the caller began (at most the late start): the uneven end is at least c1 - c0 -
  // late start, about 1 ms on a quiet machine. Otherwise a thread took the other's grain (stolen, or taken over after
  // the caller's patience, 50 us plus twice its own time), and only the bounds above hold.
  const thread_pool::takeover_timing t = timed_call(pool, microseconds(3000), microseconds(4000));
  CHECK(t.calls == 1);
  CHECK(t.woken_calls <= 1);
  CHECK(t.late_start_ns <= t.call_ns);
  CHECK(t.uneven_end_ns <= t.call_ns);
  const int64_t c0 = t.compute_ns[0], c1 = t.compute_ns[1];
  if (c1 == 0) {  // the worker did not come in time for its grain: the caller ran both, and there is no spread
    MESSAGE("the worker did not start within 3 ms: the caller ran both grains");
    CHECK(t.late_start_ns == 0);
    CHECK(t.uneven_end_ns == 0);
  } else if (c0 >= 3'000'000 && c0 < 6'000'000 && c1 >= 4'000'000 && c1 < 7'000'000) {
    CHECK(t.uneven_end_ns >= c1 - c0 - t.late_start_ns);
  } else {
    MESSAGE("a grain changed hands: compute ", c0, " and ", c1, " ns, late start ", t.late_start_ns, ", uneven end ",
            t.uneven_end_ns);
  }
  // One thread's call: nothing to spread.
  thread_pool one(1);
  const thread_pool::takeover_timing t1 = timed_call(one, microseconds(100), microseconds(100));
  CHECK(t1.late_start_ns == 0);
  CHECK(t1.uneven_end_ns == 0);
  CHECK(t1.woken_calls == 0);
  pool.set_takeover_timing(false);
  CHECK(pool.takeover_timing_totals().uneven_end_ns == 0);
}

TEST_CASE("thread_pool takeover timing: each thread's read-ahead and the workers' waits, only while on [asan]") {
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  thread_pool pool(2);
  // A worker that reads ahead (this work's idle() spins until the next job) from the end of its part of the first
  // call through the caller's 3 ms pause to the next job: at least 3 ms of read-ahead, counted when it returns.
  pool.set_takeover_timing(true);
  auto work = std::make_shared<idle_recording_work>(16);
  pool.parallel_for_takeover(16, 8, 8, work);
  std::this_thread::sleep_for(milliseconds(3));
  pool.parallel_for(8, [](int64_t, int64_t) {});  // stops the worker's idle(), which then records itself
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool worker_idled = false;
  while (!worker_idled && std::chrono::steady_clock::now() < deadline) {
    for (const auto& call : work->idle_calls())
      worker_idled = worker_idled || call.thread_index == 1;
    std::this_thread::sleep_for(milliseconds(1));
  }
  // A worker's times are added once it is back from them, which may be after the call that ended them returned.
  auto eventually = [&](const auto& holds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!holds(pool.takeover_timing_totals()) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(milliseconds(1));
    return pool.takeover_timing_totals();
  };
  thread_pool::takeover_timing t = pool.takeover_timing_totals();
  REQUIRE(t.read_ahead_ns.size() == 2);
  if (worker_idled && work->computed_by(8) != std::this_thread::get_id()) {
    t = eventually([](const thread_pool::takeover_timing& x) { return x.read_ahead_ns[1] >= 3'000'000; });
    CHECK(t.read_ahead_ns[1] >= 3'000'000);
  } else {
    MESSAGE("the worker computed no grain of the call (the caller took both): no read-ahead to count");
  }
  // A work with nothing to read ahead: the worker waits through the caller's 30 ms pause (spinning, then asleep), less
  // however late the OS let it come back from the call before (half of it allowed for a busy machine).
  pool.set_takeover_timing(true);
  pool.parallel_for_takeover(2, 1, 1,
                             std::make_shared<timed_items_work>(std::vector{microseconds(200), microseconds(200)}));
  std::this_thread::sleep_for(milliseconds(30));
  pool.parallel_for(8, [](int64_t, int64_t) {});
  t = eventually([](const thread_pool::takeover_timing& x) { return x.worker_wait_ns >= 15'000'000; });
  CHECK(t.worker_wait_ns >= 15'000'000);
  CHECK(t.read_ahead_ns[0] + t.read_ahead_ns[1] < 5'000'000);  // idle() returned at once (a few clock reads)
  // Off: nothing is counted (given the worker time to come back from what it was doing).
  pool.set_takeover_timing(false);
  pool.parallel_for_takeover(16, 8, 8, std::make_shared<idle_recording_work>(16));
  std::this_thread::sleep_for(milliseconds(2));
  pool.parallel_for(8, [](int64_t, int64_t) {});
  std::this_thread::sleep_for(milliseconds(20));
  t = pool.takeover_timing_totals();
  CHECK(t.worker_wait_ns == 0);
  CHECK(t.read_ahead_ns[0] + t.read_ahead_ns[1] == 0);
  // One thread: no worker, nothing read ahead.
  thread_pool one(1);
  one.set_takeover_timing(true);
  one.parallel_for_takeover(16, 8, 8, std::make_shared<idle_recording_work>(16));
  t = one.takeover_timing_totals();
  REQUIRE(t.read_ahead_ns.size() == 1);
  CHECK(t.read_ahead_ns[0] == 0);
  CHECK(t.worker_wait_ns == 0);
}

TEST_CASE("thread_pool::global is one process-wide pool") {
  thread_pool& a = thread_pool::global();
  thread_pool& b = thread_pool::global();
  CHECK(&a == &b);
  CHECK(a.size() >= 1);
  check_coverage(a, 777);
}

TEST_CASE("usable CPUs: cgroup quotas are read as vLLM users set them in containers") {
  using actorllm::cpus_from_cfs;
  using actorllm::cpus_from_cpu_max;
  CHECK(cpus_from_cpu_max("200000 100000") == 2);
  CHECK(cpus_from_cpu_max("150000 100000\n") == 2);  // a part of a CPU counts as one
  CHECK(cpus_from_cpu_max("50000 100000") == 1);
  CHECK_FALSE(cpus_from_cpu_max("max 100000").has_value());
  CHECK_FALSE(cpus_from_cpu_max("").has_value());
  CHECK_FALSE(cpus_from_cpu_max("lots 100000").has_value());
  CHECK(cpus_from_cfs(400000, 100000) == 4);
  CHECK_FALSE(cpus_from_cfs(-1, 100000).has_value());
  const int n = actorllm::usable_cpu_count();
  CHECK(n >= 1);
  CHECK(n <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST_CASE("spin_until: gives up after its budget, or returns as soon as the condition holds") {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  CHECK_FALSE(actorllm::spin_until([] { return false; }, std::chrono::milliseconds(5)));
  const auto waited = clock::now() - t0;
  CHECK(waited >= std::chrono::milliseconds(5));
  CHECK(waited < std::chrono::seconds(2));  // the budget plus a time slice or so, even on a busy machine
  int polls = 0;
  CHECK(actorllm::spin_until([&] { return ++polls == 3000; }, std::chrono::seconds(60)));  // past the pure spins
  CHECK(polls == 3000);
}

namespace {
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

TEST_CASE("thread_pool: idle workers sleep instead of spinning, and wake for the next call") {
  // Workers that kept spinning would burn three cores' worth (as much as the machine lets them) while the pool is
  // idle; past the spin budget they are asleep and the process uses next to nothing.
  thread_pool pool(4);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(1000, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin budget
  const double cpu0 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const double used = process_cpu_seconds() - cpu0;
  CHECK(used < 0.1);
  pool.parallel_for(1000, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  CHECK(sum.load() == 2000);
}
