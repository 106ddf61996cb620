// The TP collectives over Gloo, ranks as threads: sums equal to the serial sum and to shared_memory_collective's
// within float tolerance, gathers exact, every rank agreeing; a rank that never joins or never calls fails the
// others within the timeout.
#include "comm/gloo_collective.hpp"
#include "collective_test_inputs.hpp"
#include "comm/comm_error.hpp"
#include "comm/memory_store.hpp"
#include "comm/shared_memory_collective.hpp"
#include "gloo_test_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

using test::random_inputs;

/// Float sums of n_rank terms in different orders differ by a few ulps of the sum of magnitudes.
bool close(float a, double ref, double magnitude) { return std::abs(a - ref) <= 1e-6 + 8 * 1.2e-7 * magnitude; }

/// The all-reduce of `inputs` by shared_memory_collective (threads, rank-order sums).
std::vector<float> shared_memory_sum(const std::vector<std::vector<float>>& inputs) {
  const int n_rank = static_cast<int>(inputs.size());
  auto group = std::make_shared<comm::shared_memory_group>(n_rank);
  std::vector<std::vector<float>> out = inputs;
  std::vector<std::thread> threads;
  for (int r = 0; r < n_rank; ++r)
    threads.emplace_back([&, r] {
      comm::shared_memory_collective c{group, r};
      c.all_reduce_sum(out[static_cast<size_t>(r)].data(), static_cast<int64_t>(out[0].size()));
    });
  for (auto& t : threads)
    t.join();
  return out[0];
}

}  // namespace

TEST_CASE("gloo all_reduce_sum matches the serial sum and shared_memory_collective [asan]") {
  for (int n_rank : {1, 2, 3, 4}) {
    CAPTURE(n_rank);
    const std::vector<int64_t> sizes{1, 7, 1000, 4097, 300'001};  // odd sizes; the last spans many ring segments
    // results[rank][size index]
    std::vector<std::vector<std::vector<float>>> results(static_cast<size_t>(n_rank));
    comm::memory_store store;
    test::run_gloo_ranks(store, "allreduce", n_rank, [&](std::shared_ptr<comm::gloo_group> group) {
      comm::gloo_collective c{group};
      REQUIRE(c.rank() == group->rank());
      REQUIRE(c.size() == n_rank);
      for (size_t s = 0; s < sizes.size(); ++s) {
        auto v = random_inputs(n_rank, sizes[s], static_cast<uint32_t>(s))[static_cast<size_t>(c.rank())];
        c.all_reduce_sum(v.data(), sizes[s]);
        results[static_cast<size_t>(c.rank())].push_back(std::move(v));
      }
    });
    for (size_t s = 0; s < sizes.size(); ++s) {
      CAPTURE(sizes[s]);
      const auto inputs = random_inputs(n_rank, sizes[s], static_cast<uint32_t>(s));
      const auto shm = shared_memory_sum(inputs);
      const auto& got = results[0][s];
      int64_t bad = 0;
      for (int64_t i = 0; i < sizes[s]; ++i) {
        double ref = 0, magnitude = 0;
        for (const auto& in : inputs) {
          ref += in[static_cast<size_t>(i)];
          magnitude += std::abs(in[static_cast<size_t>(i)]);
        }
        const auto k = static_cast<size_t>(i);
        if (!close(got[k], ref, magnitude) || !close(shm[k], ref, magnitude) || std::abs(got[k] - shm[k]) > 1e-5f)
          ++bad;
      }
      CHECK(bad == 0);
      // Gloo's ring reduces each chunk on one rank and passes the result on: every rank holds the same bits.
      for (int r = 1; r < n_rank; ++r)
        CHECK(results[static_cast<size_t>(r)][s] == got);
    }
  }
}

TEST_CASE("gloo all_gather concatenates in rank order, also in place [asan]") {
  for (int n_rank : {2, 3, 4}) {
    CAPTURE(n_rank);
    comm::memory_store store;
    std::vector<int64_t> wrong(static_cast<size_t>(n_rank), 0);
    test::run_gloo_ranks(store, "allgather", n_rank, [&](std::shared_ptr<comm::gloo_group> group) {
      comm::gloo_collective c{group};
      for (int round = 0; round < 20; ++round) {
        const int64_t per = 1 + round * 997 % 5000;
        const auto inputs = random_inputs(n_rank, per, static_cast<uint32_t>(round));
        const auto& mine = inputs[static_cast<size_t>(c.rank())];
        std::vector<float> out(static_cast<size_t>(per * n_rank), -7.0f);
        if (round % 2 == 0) {
          c.all_gather(mine.data(), per, out.data());
        } else {  // in place: this rank's slice of `out` already holds its input
          std::copy(mine.begin(), mine.end(), out.begin() + c.rank() * per);
          c.all_gather(out.data() + c.rank() * per, per, out.data());
        }
        for (int r = 0; r < n_rank; ++r)
          for (int64_t i = 0; i < per; ++i)
            if (out[static_cast<size_t>(r * per + i)] != inputs[static_cast<size_t>(r)][static_cast<size_t>(i)])
              ++wrong[static_cast<size_t>(c.rank())];
        std::vector<float> ones(5, 1.0f);
        c.all_reduce_sum(ones.data(), 5);  // interleaved with all-reduces
        if (ones[4] != static_cast<float>(n_rank))
          ++wrong[static_cast<size_t>(c.rank())];
      }
    });
    for (int r = 0; r < n_rank; ++r)
      CHECK(wrong[static_cast<size_t>(r)] == 0);
  }
}

TEST_CASE("gloo group: a rank that never joins fails the others within the timeout, naming it") {
  comm::memory_store store;
  const auto timeout = 1000ms;
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    comm::gloo_group group{store, "lonely", 0, 2, {.host = "127.0.0.1", .timeout = timeout}};
    FAIL("connected to a rank that never joined");
  } catch (const comm::comm_error& e) {
    message = e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  INFO(message);
  CHECK(waited >= timeout * 9 / 10);  // it did wait (not an immediate failure)
  CHECK(waited < timeout + 2s);
  CHECK(message.find("'lonely'") != std::string::npos);
  CHECK(message.find("rank 1 never joined") != std::string::npos);
}

TEST_CASE("gloo all_reduce_sum: a peer that never calls it fails this rank within the timeout") {
  comm::memory_store store;
  const auto timeout = 1000ms;
  std::promise<void> rank0_done;
  auto rank0_done_future = rank0_done.get_future().share();
  std::string message, second;
  std::chrono::steady_clock::duration waited{};
  test::run_gloo_ranks(store, "silent", 2,
                       [&](std::shared_ptr<comm::gloo_group> group) {
                         comm::gloo_collective c{group};
                         if (group->rank() == 1) {  // stays connected but never calls the collective
                           rank0_done_future.wait();
                           return;
                         }
                         std::vector<float> v(1024, 1.0f);
                         const auto start = std::chrono::steady_clock::now();
                         try {
                           c.all_reduce_sum(v.data(), 1024);
                         } catch (const comm::comm_error& e) {
                           message = e.what();
                         }
                         waited = std::chrono::steady_clock::now() - start;
                         try {  // the group is broken now: the next call fails at once with the first cause
                           c.all_reduce_sum(v.data(), 1024);
                         } catch (const comm::comm_error& e) {
                           second = e.what();
                         }
                         rank0_done.set_value();
                       },
                       {.host = "127.0.0.1", .timeout = timeout});
  INFO(message);
  CHECK(waited >= timeout * 9 / 10);  // it did wait (not an immediate failure)
  CHECK(waited < timeout + 2s);
  CHECK(message.find("gloo group 'silent' rank 0 of 2: all_reduce_sum of 1024 floats failed") != std::string::npos);
  CHECK(second.find("broken") != std::string::npos);
}
