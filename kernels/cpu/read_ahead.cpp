// Read-ahead across kernel calls (see read_ahead.hpp).
#include "kernels/cpu/read_ahead.hpp"
#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace actorllm::cpu {
std::atomic<int64_t> tmp_ra_bytes[4], tmp_ra_calls[4], tmp_ra_full[4];

void read_ahead(const read_ahead_plan& plan, int thread_index, const std::function<bool()>& stop) noexcept {
  if (thread_index < 0 || static_cast<size_t>(thread_index) >= plan.threads.size())
    return;
  const read_ahead_plan::thread_heads& h = plan.threads[static_cast<size_t>(thread_index)];
  constexpr size_t line = 64, check_every = 1024;
  tmp_ra_calls[thread_index & 3] += 1;
  for (size_t off = 0; off < h.bytes; off += check_every) {
    if (stop())
      return;
    tmp_ra_bytes[thread_index & 3] += check_every * h.count;
    for (size_t l = off; l < off + check_every && l < h.bytes; l += line)
      for (int s = 0; s < h.count; ++s) {
#if defined(__x86_64__) || defined(__i386__)
        // T1: into L2 (AMD and Intel), leaving L1 to the kernel running beside it on a caller that takes over.
        _mm_prefetch(h.at[static_cast<size_t>(s)] + l, _MM_HINT_T1);
#else
        __builtin_prefetch(h.at[static_cast<size_t>(s)] + l, 0, 2);
#endif
      }
  }
  tmp_ra_full[thread_index & 3] += 1;
}

std::shared_ptr<const read_ahead_plan> next_call_table::advance(const read_ahead_key& key,
                                                                const std::function<read_ahead_plan()>& make_plan) {
  // This thread's previous call, and the table it went to (a call made through another table is not this one's).
  thread_local const next_call_table* previous_table = nullptr;
  thread_local read_ahead_key previous;
  std::lock_guard lock(mutex_);
  if (previous_table == this && previous.weights != nullptr) {
    if (next_.size() >= max_entries && next_.find(previous.weights) == next_.end())
      next_.clear();
    successor& s = next_[previous.weights];
    if (s.plan == nullptr || !(s.key == key)) {
      s.key = key;
      s.plan = std::make_shared<const read_ahead_plan>(make_plan());
    }
  }
  previous_table = this;
  previous = key;
  const auto it = next_.find(key.weights);
  return it == next_.end() ? nullptr : it->second.plan;
}

next_call_table& next_call_table::global() {
  static next_call_table table;
  return table;
}

}  // namespace actorllm::cpu
