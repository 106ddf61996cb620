// spin_barrier: every round releases only after every thread arrived and makes its writes visible, whether the
// waiters catch the round while spinning or asleep, and with more threads than cores; spin_until_descheduled's three
// outcomes.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "util/spin_barrier.hpp"
#include "util/spin_wait.hpp"

using actorllm::spin_barrier;

namespace {

// `n_threads` threads meet `rounds` times; before each round every thread writes the round into its slot of that
// round's parity, after it every thread checks all slots of that parity. Returns the number of wrong reads.
int wrong_reads(int n_threads, int rounds, std::chrono::nanoseconds spin) {
  spin_barrier barrier(n_threads, spin);
  std::vector<std::atomic<int>> slots[2] = {std::vector<std::atomic<int>>(static_cast<size_t>(n_threads)),
                                            std::vector<std::atomic<int>>(static_cast<size_t>(n_threads))};
  for (auto& parity : slots)
    for (auto& s : parity)
      s.store(-1);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        auto& mine = slots[r % 2];
        mine[static_cast<size_t>(t)].store(r, std::memory_order_relaxed);  // ordered by the barrier, not the atomic
        barrier.arrive_and_wait();
        for (auto& s : mine)
          if (s.load(std::memory_order_relaxed) != r)
            wrong.fetch_add(1);
      }
    });
  for (auto& th : threads)
    th.join();
  return wrong.load();
}

}  // namespace

TEST_CASE("spin_barrier: one thread passes at once [asan]") {
  spin_barrier barrier(1);
  for (int i = 0; i < 3; ++i)
    barrier.arrive_and_wait();
  CHECK(barrier.size() == 1);
}

TEST_CASE("spin_barrier: rounds release together and publish every thread's writes [asan]") {
  SUBCASE("spinning waiters") { CHECK(wrong_reads(2, 20000, spin_barrier::default_spin) == 0); }
  SUBCASE("waiters that sleep at once") { CHECK(wrong_reads(3, 5000, std::chrono::nanoseconds{0}) == 0); }
  SUBCASE("more threads than cores") { CHECK(wrong_reads(8, 2000, spin_barrier::default_spin) == 0); }
}

TEST_CASE("spin_barrier: a waiter asleep is woken by the last arrival [asan]") {
  spin_barrier barrier(2, std::chrono::nanoseconds{0});
  std::atomic<bool> passed{false};
  std::thread waiter([&] {
    barrier.arrive_and_wait();
    passed = true;
  });
  // Give the waiter time to fall asleep (the test passes either way; this makes the futex path the likely one).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(passed.load());
  barrier.arrive_and_wait();
  waiter.join();
  CHECK(passed.load());
}

TEST_CASE("spin_until_descheduled: held, timed out, or off its core between two looks at the clock") {
  using namespace std::chrono_literals;
  CHECK(actorllm::spin_until_descheduled([] { return true; }, 1ms, 1s) == actorllm::spin_outcome::held);
  const auto start = std::chrono::steady_clock::now();
  CHECK(actorllm::spin_until_descheduled([] { return false; }, 2ms, 1s) == actorllm::spin_outcome::timed_out);
  CHECK(std::chrono::steady_clock::now() - start >= 2ms);
  // A look that takes long stands for the thread taken off its core: what counts is the time between clock reads.
  int looks = 0;
  const auto slow_look = [&] {
    if (++looks == 10)
      std::this_thread::sleep_for(5ms);
    return false;
  };
  CHECK(actorllm::spin_until_descheduled(slow_look, 10s, 1ms) == actorllm::spin_outcome::descheduled);
}
