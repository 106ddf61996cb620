// A barrier for the threads of one process that meet often and briefly (the ranks of an in-process TP group meet in
// every collective, a dozen or more times a decode step): a waiter spins a bounded time, then sleeps on a futex.
//
// Not std::barrier: libstdc++'s wait calls sched_yield four times before it sleeps, and on Linux's EEVDF scheduler
// (6.6 on) every yield pushes the caller's virtual deadline a time slice later (util/spin_wait.hpp), so on cores
// shared with other work a rank that waited is picked after the busy threads, and the ranks meeting it wait for it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace actorllm {

/// Reusable barrier of a fixed number of threads. Each arrive_and_wait() returns once all `size` threads called it
/// for the same round; everything a thread wrote before it arrived is visible to every thread after it returns.
class spin_barrier {
 public:
  /// `size` >= 1 threads; a waiter polls for `spin` before it sleeps (0: sleeps at once).
  explicit spin_barrier(int size, std::chrono::nanoseconds spin = default_spin);
  spin_barrier(const spin_barrier&) = delete;
  spin_barrier& operator=(const spin_barrier&) = delete;

  /// How long a waiter polls by default. Brief: the ranks of a decode step's collectives mostly arrive within
  /// microseconds, and a longer poll keeps a core from the process's other threads (serve's HTTP and actor threads
  /// beside two TP ranks on 2 vCPUs: a 48-token completion of stories260K took 0.008-0.028 s (medians of 30), in two
  /// modes, polling 50 us, against 0.014-0.018 s polling 5 us or not at all).
  static constexpr std::chrono::nanoseconds default_spin = std::chrono::microseconds(5);

  int size() const { return size_; }
  void arrive_and_wait();

 private:
  const int size_;
  const std::chrono::nanoseconds spin_;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint32_t> round_{0};  // the futex word: bumped by the last arrival of each round
  std::atomic<int> sleepers_{0};
};

}  // namespace actorllm
