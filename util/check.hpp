// Invariant checks: the assert tier of the house style's three error tiers. A failed check is a bug in actorllm,
// not bad input, so it aborts with the location and the failed condition.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace actorllm::detail {
[[noreturn]] inline void check_failed(const char* cond, const char* msg, const char* file, int line) {
  std::fprintf(stderr, "actorllm: internal check failed at %s:%d: %s%s%s\n", file, line, cond, msg[0] ? ": " : "", msg);
  std::abort();
}
}  // namespace actorllm::detail

/// Aborts with a message when `cond` is false. Always on (also in release builds): these guard memory safety.
#define ACTORLLM_CHECK(cond, msg)                                       \
  do {                                                                  \
    if (!(cond)) [[unlikely]]                                           \
      ::actorllm::detail::check_failed(#cond, msg, __FILE__, __LINE__); \
  } while (0)

/// Like ACTORLLM_CHECK but compiled out unless NDEBUG is unset; for hot loops.
#ifdef NDEBUG
#define ACTORLLM_DCHECK(cond, msg) ((void)0)
#else
#define ACTORLLM_DCHECK(cond, msg) ACTORLLM_CHECK(cond, msg)
#endif
