// The in-process TP collectives: exact sums and gathers, identical on every rank, over many back-to-back calls.
#include "comm/shared_memory_collective.hpp"

#include "comm/comm_error.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;

namespace {

template <class F>
void run_ranks(int n, F&& body) {
  auto group = std::make_shared<comm::shared_memory_group>(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      comm::shared_memory_collective c{group, r};
      body(c);
    });
  for (auto& t : threads)
    t.join();
}

}  // namespace

TEST_CASE("shared-memory all_reduce_sum gives every rank the same exact sums [asan]") {
  for (int tp : {1, 2, 3, 4, 8}) {
    std::vector<std::vector<float>> results(static_cast<size_t>(tp));
    run_ranks(tp, [&](comm::shared_memory_collective& c) {
      // Sizes that do not divide by the rank count, and a stream of collectives reusing the scratch buffers.
      for (int64_t n : {1, 7, 1000, 4097, 3}) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          v[static_cast<size_t>(i)] = static_cast<float>((c.rank() + 1) * 1000 + i);
        c.all_reduce_sum(v.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          float expect = 0;
          for (int r = 0; r < tp; ++r)
            expect += static_cast<float>((r + 1) * 1000 + i);
          REQUIRE(v[static_cast<size_t>(i)] == expect);
        }
        if (n == 4097)
          results[static_cast<size_t>(c.rank())] = v;
      }
    });
    for (int r = 1; r < tp; ++r)
      CHECK(results[static_cast<size_t>(r)] == results[0]);
  }
}

TEST_CASE("shared-memory all_reduce_sum adds in rank order both ways: one barrier for small sums, two above [asan]") {
  // Values of many magnitudes, so that the order of the additions shows in the bits: each way must give the float
  // sum of rank 0's value plus rank 1's, and so on, on every rank. Sizes on both sides of one_barrier_floats (n x
  // ranks), back to back, so that each way's buffers are reused after the other's.
  constexpr int64_t limit = comm::shared_memory_collective::one_barrier_floats;
  const auto value = [](int rank, int64_t i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(rank + 1) * 40503u;
    const float mantissa = 1.0f + static_cast<float>(h % 1000003u) / 1000003.0f;
    return (h & 1u ? -mantissa : mantissa) * static_cast<float>(1u << (h >> 27));  // up to 2^31
  };
  for (int tp : {2, 3, 8}) {
    const std::vector<int64_t> sizes{5, limit / tp, limit / tp + 1, 33, limit / tp + 1000, limit / tp - 1};
    run_ranks(tp, [&](comm::shared_memory_collective& c) {
      for (const int64_t n : sizes) {
        CAPTURE(n);
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          v[static_cast<size_t>(i)] = value(c.rank(), i);
        c.all_reduce_sum(v.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          float expect = value(0, i);
          for (int r = 1; r < tp; ++r)
            expect += value(r, i);
          if (v[static_cast<size_t>(i)] != expect)
            REQUIRE_MESSAGE(false, "rank " << c.rank() << ", item " << i << ": " << v[static_cast<size_t>(i)]
                                           << " against " << expect);
        }
      }
    });
  }
}

TEST_CASE("shared-memory all_gather concatenates in rank order, one barrier or two [asan]") {
  constexpr int64_t limit = comm::shared_memory_collective::one_barrier_floats;
  for (int tp : {1, 2, 5}) {
    run_ranks(tp, [&](comm::shared_memory_collective& c) {
      for (int round = 0; round < 50; ++round) {
        // Mostly small gathers (one barrier); every eighth above the limit (two).
        const int64_t per = round % 8 == 7 ? limit / tp + 1 + round : 3 + round % 4;
        std::vector<float> in(static_cast<size_t>(per));
        for (int64_t i = 0; i < per; ++i)
          in[static_cast<size_t>(i)] = static_cast<float>(c.rank() * 100 + i + round);
        std::vector<float> out(static_cast<size_t>(per * tp));
        c.all_gather(in.data(), per, out.data());
        int64_t wrong = 0;
        for (int r = 0; r < tp; ++r)
          for (int64_t i = 0; i < per; ++i)
            wrong += out[static_cast<size_t>(r * per + i)] != static_cast<float>(r * 100 + i + round);
        REQUIRE_MESSAGE(wrong == 0, "round " << round << ": " << wrong << " of " << per * tp << " floats wrong");
        std::vector<float> x(5, 1.0f);
        c.all_reduce_sum(x.data(), 5);  // interleaved with all-reduces
        REQUIRE(x[4] == static_cast<float>(tp));
      }
    });
  }
}

TEST_CASE(
    "an abortable group: collectives work as usual, and an abort wakes every blocked rank with the reason [asan]") {
  constexpr int n = 4;
  auto group = std::make_shared<comm::shared_memory_group>(n, "the expert-parallel group");
  CHECK(group->abortable());
  // Ranks 0..2 sum, then wait in a second collective that rank 3 never joins; the abort must wake them.
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<float> sums(static_cast<size_t>(n), 0.0f);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      comm::shared_memory_collective c{group, r};
      float v = static_cast<float>(r + 1);
      c.all_reduce_sum(&v, 1);
      sums[static_cast<size_t>(r)] = v;
      if (r == n - 1)
        return;  // the rank that is lost
      try {
        c.all_reduce_sum(&v, 1);
      } catch (const comm::comm_error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  threads.back().join();
  threads.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds{50});  // let the others block
  group->abort("replica 1 failed");
  for (auto& t : threads)
    t.join();
  for (int r = 0; r < n; ++r)
    CHECK(sums[static_cast<size_t>(r)] == 10.0f);
  for (int r = 0; r < n - 1; ++r)
    CHECK(errors[static_cast<size_t>(r)] == "the expert-parallel group was aborted: replica 1 failed");
  // A later collective throws at once, even on a rank that would complete it alone.
  comm::shared_memory_collective late{group, 0};
  float v = 1.0f;
  CHECK_THROWS_AS(late.all_reduce_sum(&v, 1), comm::comm_error);
}

TEST_CASE("an abortable barrier's closing wait outlasts an abort: ranks that passed the opening one all meet [asan]") {
  // What keeps a collective's input buffers alive until every peer has copied them: an abort between the opening
  // and the closing barrier must not let a rank leave early (and free what a peer still reads).
  comm::abortable_barrier barrier{3, "the expert-parallel group"};
  std::atomic<int> passed{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      barrier.arrive_and_wait();  // opening: completes normally
      if (r == 2)
        std::this_thread::sleep_for(std::chrono::milliseconds{100});  // a slow reader
      if (r == 0)
        barrier.abort("replica 1 failed");
      try {
        barrier.arrive_and_wait(/*abortable=*/false);  // closing: must wait for the slow rank
        passed.fetch_add(1);
      } catch (const comm::comm_error&) {
      }
    });
  for (auto& t : ranks)
    t.join();
  CHECK(passed.load() == 3);
  CHECK(barrier.aborted());
  CHECK_THROWS_WITH_AS(barrier.arrive_and_wait(), "the expert-parallel group was aborted: replica 1 failed",
                       comm::comm_error);
}

TEST_CASE("a TP group is not abortable: its ranks live and die together") {
  CHECK_FALSE(comm::shared_memory_group{2}.abortable());
}
