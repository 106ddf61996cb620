// A wait that spins only for a bounded time. On cores shared with other work a thread that waits by spinning holds a
// core the thread it waits for may need; past a few microseconds it yields on every round, and past its budget it
// stops, so the caller can go to sleep (a futex, a condition variable) instead of burning its share.
#pragma once

#include "util/cpu_relax.hpp"

#include <chrono>
#include <thread>

namespace actorllm {

/// Polls `pred` until it holds or `budget` has passed; true when it held. The first ~1,000 polls are a pure pause
/// loop (a few microseconds: the common case of a partner a moment behind), then each poll yields the core. Returns
/// within `budget` plus one scheduler time slice however busy the machine.
template <class Pred>
bool spin_until(Pred pred, std::chrono::nanoseconds budget) {
  constexpr int pure_spins = 1024;
  for (int i = 0; i < pure_spins; ++i) {
    if (pred())
      return true;
    cpu_relax();
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (pred())
      return true;
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() - start > budget)
      return pred();
  }
}

}  // namespace actorllm
