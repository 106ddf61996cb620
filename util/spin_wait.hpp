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

/// How spin_until_descheduled ended.
enum class spin_outcome { held, timed_out, descheduled };

/// Like spin_until, but also gives up once it sees that the OS took this thread off its core between two looks at
/// the clock for more than `gap` (other work wants the core: polling on only takes its turn, and its time counts
/// against this thread's share of the core, so the caller sleeps instead and may poll less for a while).
template <class Pred>
spin_outcome spin_until_descheduled(Pred pred, std::chrono::nanoseconds budget, std::chrono::nanoseconds gap) {
  constexpr int polls_per_clock_read = 64;
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  for (;;) {
    for (int i = 0; i < polls_per_clock_read; ++i) {
      if (pred())
        return spin_outcome::held;
      cpu_relax();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last > gap)
      return pred() ? spin_outcome::held : spin_outcome::descheduled;
    if (now - start > budget)
      return pred() ? spin_outcome::held : spin_outcome::timed_out;
    last = now;
  }
}

}  // namespace actorllm
