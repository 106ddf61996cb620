// Point-to-point transfers over Gloo: payloads matched by tag in any order, a missing sender fails the receiver
// within the timeout.
#include "comm/gloo_pipe.hpp"
#include "comm/comm_error.hpp"
#include "comm/memory_store.hpp"
#include "gloo_test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <random>
#include <string>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

/// The payload of message `k`: its size and contents differ per message.
std::vector<float> payload(int k) {
  std::vector<float> v(static_cast<size_t>(10 + 37 * k));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(k * 100'000 + static_cast<int>(i));
  return v;
}

}  // namespace

TEST_CASE("gloo pipe: 100 messages received out of order get their own payloads [asan]") {
  constexpr int n_message = 100;
  // Step ids as tags, up to the largest allowed.
  std::vector<uint64_t> tags;
  for (int k = 0; k < n_message - 1; ++k)
    tags.push_back((uint64_t{1} << 40) + static_cast<uint64_t>(k) * 7919);
  tags.push_back(comm::gloo_pipe::max_tag);
  int wrong = 0, still_pending = 0;
  comm::memory_store store;
  test::run_gloo_ranks(store, "pipe", 2, [&](std::shared_ptr<comm::gloo_group> group) {
    comm::gloo_pipe pipe{group, n_message};
    if (group->rank() == 0) {
      for (int k = 0; k < n_message; ++k) {
        auto v = payload(k);
        pipe.send(1, tags[static_cast<size_t>(k)], v.data(), static_cast<int64_t>(v.size()));
        std::fill(v.begin(), v.end(), -1.0f);  // send() copied it
      }
      pipe.flush();
      still_pending = static_cast<int>(pipe.pending_sends());
      return;
    }
    std::vector<int> order(n_message);
    for (int k = 0; k < n_message; ++k)
      order[static_cast<size_t>(k)] = k;
    std::shuffle(order.begin(), order.end(), std::mt19937{42});
    for (int k : order) {
      const auto expect = payload(k);
      std::vector<float> got(expect.size(), 0.0f);
      pipe.recv(0, tags[static_cast<size_t>(k)], got.data(), static_cast<int64_t>(got.size()));
      if (got != expect)
        ++wrong;
    }
  });
  CHECK(wrong == 0);
  CHECK(still_pending == 0);
}

TEST_CASE("gloo pipe: both directions at once, a step at a time [asan]") {
  comm::memory_store store;
  int wrong[2] = {0, 0};
  test::run_gloo_ranks(store, "ping", 2, [&](std::shared_ptr<comm::gloo_group> group) {
    comm::gloo_pipe pipe{group};
    const int me = group->rank(), peer = 1 - me;
    for (uint64_t step = 0; step < 200; ++step) {
      std::vector<float> out(64 * 33, static_cast<float>(me * 1000 + static_cast<int>(step)));
      pipe.send(peer, step, out.data(), static_cast<int64_t>(out.size()));
      std::vector<float> in(out.size());
      pipe.recv(peer, step, in.data(), static_cast<int64_t>(in.size()));
      if (in != std::vector<float>(in.size(), static_cast<float>(peer * 1000 + static_cast<int>(step))))
        ++wrong[me];
    }
    pipe.flush();
  });
  CHECK(wrong[0] == 0);
  CHECK(wrong[1] == 0);
}

TEST_CASE("gloo pipe: a recv whose peer never sends fails within the timeout") {
  comm::memory_store store;
  const auto timeout = 1000ms;
  std::promise<void> rank0_done;
  auto rank0_done_future = rank0_done.get_future().share();
  std::string message;
  std::chrono::steady_clock::duration waited{};
  test::run_gloo_ranks(store, "mute", 2,
                       [&](std::shared_ptr<comm::gloo_group> group) {
                         comm::gloo_pipe pipe{group};
                         if (group->rank() == 1) {
                           rank0_done_future.wait();
                           return;
                         }
                         std::vector<float> v(4096);
                         const auto start = std::chrono::steady_clock::now();
                         try {
                           pipe.recv(1, 12345, v.data(), 4096);
                         } catch (const comm::comm_error& e) {
                           message = e.what();
                         }
                         waited = std::chrono::steady_clock::now() - start;
                         rank0_done.set_value();
                       },
                       {.host = "127.0.0.1", .timeout = timeout});
  INFO(message);
  CHECK(waited >= timeout * 9 / 10);  // it did wait (not an immediate failure)
  CHECK(waited < timeout + 2s);
  CHECK(message.find("gloo group 'mute' rank 0 of 2: recv of 4096 floats (tag 12345) with rank 1 failed") !=
        std::string::npos);
}

TEST_CASE("gloo pipe: destroying a pipe whose sends were never received returns after the timeout") {
  comm::memory_store store;
  const auto timeout = 1000ms;
  std::promise<void> rank0_done;
  auto rank0_done_future = rank0_done.get_future().share();
  std::chrono::steady_clock::duration waited{};
  test::run_gloo_ranks(store, "unheard", 2,
                       [&](std::shared_ptr<comm::gloo_group> group) {
                         if (group->rank() == 1) {
                           rank0_done_future.wait();
                           return;
                         }
                         const auto start = std::chrono::steady_clock::now();
                         {
                           comm::gloo_pipe pipe{group};
                           std::vector<float> v(100'000, 1.0f);
                           for (uint64_t tag = 0; tag < 3; ++tag)
                             pipe.send(1, tag, v.data(), static_cast<int64_t>(v.size()));
                         }  // the destructor waits out the first send, then drops the rest (the group is broken)
                         waited = std::chrono::steady_clock::now() - start;
                         rank0_done.set_value();
                       },
                       {.host = "127.0.0.1", .timeout = timeout});
  CHECK(waited >= timeout * 9 / 10);
  CHECK(waited < timeout + 2s);
}
