// The real all-to-all of expert parallelism on every host transport (threads over shared memory, processes over a
// shared-memory segment, Gloo over loopback): uneven counts with zeros and a rank that sends nothing arrive in source
// order, go back where they came from, equal the all-gather form's result, and are counted by the formula; an abort
// or a lost peer while a rank waits ends its wait with the group's error.
#include "all_to_all_checks.hpp"
#include "comm/comm_error.hpp"
#include "comm/gloo_collective.hpp"
#include "comm/interprocess_collective.hpp"
#include "comm/memory_store.hpp"
#include "comm/shared_memory_collective.hpp"
#include "gloo_test_support.hpp"
#include "process_test_support.hpp"
#include "rank_threads.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

/// Runs check_all_to_all_rounds on every rank and fails with the first rank's complaint.
template <class Make>
void check_on_threads(int n, Make&& make) {
  std::vector<std::string> problems(static_cast<size_t>(n));
  test::run_rank_threads(n, [&](int r) {
    auto c = make(r);
    problems[static_cast<size_t>(r)] = test::check_all_to_all_rounds(*c);
  });
  for (int r = 0; r < n; ++r) {
    INFO("group of " << n << ", rank " << r);
    CHECK(problems[static_cast<size_t>(r)] == "");
  }
}

}  // namespace

TEST_CASE("shared-memory all_to_all_rows: uneven rows in source order, back, as the all-gather form, counted [asan]") {
  for (int n : {1, 2, 3, 4, 5}) {
    auto group = std::make_shared<comm::shared_memory_group>(n);
    check_on_threads(n, [&](int r) { return std::make_unique<comm::shared_memory_collective>(group, r); });
    // The abortable group of lockstep replicas takes the same path.
    auto abortable = std::make_shared<comm::shared_memory_group>(n, "the expert-parallel group");
    check_on_threads(n, [&](int r) { return std::make_unique<comm::shared_memory_collective>(abortable, r); });
  }
}

TEST_CASE("shared-memory all_to_all_rows: an abort wakes the ranks waiting for a peer that never comes [asan]") {
  constexpr int n = 3;
  auto group = std::make_shared<comm::shared_memory_group>(n, "the expert-parallel group");
  std::vector<std::string> errors(static_cast<size_t>(n - 1));
  std::vector<std::thread> waiting;
  for (int r = 0; r < n - 1; ++r)
    waiting.emplace_back([&, r] {
      comm::shared_memory_collective c{group, r};
      const std::vector<int64_t> rows{1, 0, 2};
      const std::vector<float> send(3 * 4, 1.0f);
      std::vector<float> recv;
      try {
        c.all_to_all_rows(send.data(), rows, 4, recv);
      } catch (const comm::comm_error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  std::this_thread::sleep_for(50ms);  // let them block (the test holds either way: a late arrival throws at once)
  group->abort("replica 2 failed");
  for (auto& t : waiting)
    t.join();
  for (const auto& e : errors)
    CHECK(e == "the expert-parallel group was aborted: replica 2 failed");
  comm::shared_memory_collective late{group, 2};
  std::vector<float> recv;
  CHECK_THROWS_AS(late.all_to_all_rows(nullptr, std::vector<int64_t>(n, 0), 4, recv), comm::comm_error);
  CHECK(late.exchange_statistics().exchanges == 0);
}

TEST_CASE(
    "interprocess all_to_all_rows: uneven rows in source order, back, as the all-gather form, counted, in "
    "pieces too [asan]") {
  comm::memory_store store;
  for (int n : {1, 2, 3, 4}) {
    // A slot of 2^18 floats carries every round at once; one of 37 splits rows (width 5) across exchanges and
    // leaves pieces where some ranks have nothing left to write.
    for (int64_t capacity : {int64_t{1} << 18, int64_t{37}}) {
      comm::interprocess_options options;
      options.capacity_floats = capacity;
      const std::string name = "a2a-" + std::to_string(n) + "-" + std::to_string(capacity);
      check_on_threads(n, [&](int r) {
        auto c = comm::interprocess_collective::try_create(store, name, r, n, options);
        REQUIRE(c != nullptr);
        return c;
      });
    }
  }
}

TEST_CASE("interprocess all_to_all_rows between forked processes, then a peer that exits fails the survivors") {
  const auto dir = test::make_temp_dir("actorllm-a2a-");
  constexpr int n = 3;
  const auto statuses = test::run_children(n, [&](int rank) {
    test::file_store store{dir.string()};
    comm::interprocess_options options;
    options.capacity_floats = 64;
    auto c = comm::interprocess_collective::try_create(store, "procs", rank, n, options);
    if (!c)
      return 4;
    if (const std::string problem = test::check_all_to_all_rounds(*c); !problem.empty()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, problem.c_str());
      return 1;
    }
    if (rank == 2)
      _exit(0);  // dies without a word
    const std::vector<int64_t> rows{1, 1, 1};
    const std::vector<float> send(3 * 5, 2.0f);
    std::vector<float> recv;
    try {
      c->all_to_all_rows(send.data(), rows, 5, recv);
    } catch (const comm::comm_error& e) {
      std::fprintf(stderr, "rank %d (expected): %s\n", rank, e.what());
      // Rank 2's exit, seen directly or through the first survivor that gave up on the group.
      const std::string what = e.what();
      return what.find("rank 2 (pid") != std::string::npos || what.find("gave up") != std::string::npos ? 0 : 1;
    }
    return 1;  // the all-to-all "succeeded" with a dead peer
  });
  for (int rank = 0; rank < n; ++rank) {
    CAPTURE(rank);
    CHECK_MESSAGE(statuses[static_cast<size_t>(rank)] == 0, test::describe_status(statuses[static_cast<size_t>(rank)]));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("gloo all_to_all_rows: uneven rows in source order, back, as the all-gather form, counted [asan]") {
  comm::memory_store store;
  for (int n : {1, 2, 3, 4}) {
    std::vector<std::string> problems(static_cast<size_t>(n));
    test::run_gloo_ranks(store, "a2a" + std::to_string(n), n, [&](std::shared_ptr<comm::gloo_group> group) {
      comm::gloo_collective c{group};
      problems[static_cast<size_t>(group->rank())] = test::check_all_to_all_rounds(c);
    });
    for (int r = 0; r < n; ++r) {
      INFO("group of " << n << ", rank " << r);
      CHECK(problems[static_cast<size_t>(r)] == "");
    }
  }
}

TEST_CASE("gloo all_to_all_rows: a peer that never calls fails the waiting rank within the timeout") {
  comm::memory_store store;
  const auto timeout = 1000ms;
  std::promise<void> rank0_done;
  auto rank0_done_future = rank0_done.get_future().share();
  std::string message;
  std::chrono::steady_clock::duration waited{};
  test::run_gloo_ranks(store, "a2a-silent", 2,
                       [&](std::shared_ptr<comm::gloo_group> group) {
                         comm::gloo_collective c{group};
                         if (group->rank() == 1) {  // stays connected but never calls the all-to-all
                           rank0_done_future.wait();
                           return;
                         }
                         const std::vector<int64_t> rows{0, 2};
                         const std::vector<float> send(2 * 3, 1.0f);
                         std::vector<float> recv;
                         const auto start = std::chrono::steady_clock::now();
                         try {
                           c.all_to_all_rows(send.data(), rows, 3, recv);
                         } catch (const comm::comm_error& e) {
                           message = e.what();
                         }
                         waited = std::chrono::steady_clock::now() - start;
                         rank0_done.set_value();
                       },
                       {.host = "127.0.0.1", .timeout = timeout});
  INFO(message);
  CHECK(waited >= timeout * 9 / 10);
  CHECK(waited < timeout + 2s);
  CHECK(message.find("gloo group 'a2a-silent' rank 0 of 2: all_to_all_rows") != std::string::npos);
}
