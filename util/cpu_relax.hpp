// The pause hint for spin-wait loops: lets the sibling hyper-thread run and saves power while a waiter polls.
#pragma once

namespace actorllm {

/// One spin-wait pause (x86 `pause`, Arm `yield`; nothing elsewhere).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace actorllm
