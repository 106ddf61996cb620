// Sleeping on a 32-bit word until another thread (or process) changes it: Linux's futex, called directly.
//
// Not std::atomic::wait: libstdc++'s wait calls sched_yield before it sleeps, and on Linux's EEVDF scheduler (6.6 on)
// each yield pushes the caller's virtual deadline a time slice later (util/spin_wait.hpp); nor can it wait on memory
// shared between processes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace actorllm {

/// Whether the word lies in memory of this process only (faster) or in a mapping shared with other processes.
enum class futex_scope { process, shared_memory };

/// Sleeps while `word` holds `expected`, at most `timeout` (0 or less: no limit). Returns at once when it does not hold
/// `expected`; may also return early (a signal, a spurious wake-up): callers check what they wait for in a loop.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, futex_scope scope,
                std::chrono::nanoseconds timeout = std::chrono::nanoseconds{0});

/// Wakes every thread asleep in futex_wait on `word` (of the same scope).
void futex_wake_all(std::atomic<uint32_t>& word, futex_scope scope);

}  // namespace actorllm
