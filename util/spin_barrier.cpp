// A spin-then-sleep barrier (see spin_barrier.hpp).
#include "util/spin_barrier.hpp"

#include "util/check.hpp"
#include "util/futex.hpp"
#include "util/spin_wait.hpp"

namespace actorllm {

spin_barrier::spin_barrier(int size, std::chrono::nanoseconds spin) : size_(size), spin_(spin) {
  ACTORLLM_CHECK(size >= 1, "a barrier needs at least one thread");
}

void spin_barrier::arrive_and_wait() {
  // A thread reads the round before it arrives: the round cannot move on without its arrival.
  const uint32_t round = round_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) {
    // Reset before the round moves on: a thread released by it may arrive at the next round at once.
    arrived_.store(0, std::memory_order_relaxed);
    round_.store(round + 1, std::memory_order_seq_cst);
    // Either a sleeper counted itself before this load (and is woken), or its futex call sees the new round.
    if (sleepers_.load(std::memory_order_seq_cst) > 0)
      futex_wake_all(round_, futex_scope::process);
    return;
  }
  const auto moved_on = [&] { return round_.load(std::memory_order_acquire) != round; };
  if (spin_until(moved_on, spin_))
    return;
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (!moved_on())
    futex_wait(round_, round, futex_scope::process);
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace actorllm
