// Futex waits and wake-ups (see futex.hpp). Linux only, as the rest of the engine.
#include "util/futex.hpp"

#include <climits>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace actorllm {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free,
              "a futex word is a plain 32-bit integer");

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, futex_scope scope, std::chrono::nanoseconds timeout) {
  const int op = scope == futex_scope::process ? FUTEX_WAIT_PRIVATE : FUTEX_WAIT;
  timespec limit{};
  timespec* limit_ptr = nullptr;
  if (timeout.count() > 0) {
    limit.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
    limit.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
    limit_ptr = &limit;
  }
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op, expected, limit_ptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word, futex_scope scope) {
  const int op = scope == futex_scope::process ? FUTEX_WAKE_PRIVATE : FUTEX_WAKE;
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace actorllm
