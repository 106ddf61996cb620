// A wait that spins only for a bounded time, then lets the caller sleep (a futex, a condition variable) instead of
// burning its share of a core shared with other work.
//
// It never calls sched_yield: on Linux's EEVDF scheduler (6.6 on) each yield pushes the caller's virtual deadline one
// time slice later, so a thread that yielded in a loop is picked after every other runnable thread for a long while
// afterwards, also once it has work again. Measured on 2 vCPUs beside two busy processes (bench_cpu_decode --hog 2,
// alternated runs): batch-1 decode got 0.71-0.80 of a core and 35-43% of its quiet speed with a yielding 200 us spin,
// against 0.93-0.95 of a core and 49-50% with a pure 50 us spin and then sleep.
#pragma once

#include "util/cpu_relax.hpp"

#include <chrono>

namespace actorllm {

/// Polls `pred`, pausing between polls, until it holds or `budget` has passed; true when it held. Returns within
/// `budget` plus a time slice (if the OS takes the thread off its core meanwhile).
template <class Pred>
bool spin_until(Pred pred, std::chrono::nanoseconds budget) {
  constexpr int polls_per_clock_read = 64;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < polls_per_clock_read; ++i) {
      if (pred())
        return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() - start > budget)
      return pred();
  }
}

}  // namespace actorllm
