// The batched LoRA update on the CPU (backend::lora_add): each row's low-rank product with its own adapter's
// matrices, shrink (a x) then expand (y += b t), over the kernel pool.
#pragma once

#include "util/thread_pool.hpp"

#include <cstdint>

namespace actorllm::cpu {

/// The sizes of one lora_add call (backend::lora_add names them).
struct lora_shape {
  int64_t n = 0, n_in = 0, n_out = 0, n_slots = 0, rank = 0;
};

/// For every row t with slot s = row_slots[t] >= 0: shrunk[t] = a[s] x[t], then y[t] += b[s] shrunk[t]. Rows with a
/// negative slot are skipped (their shrunk row is left as it was). Each output element is one fixed-order f32 sum,
/// whatever the thread count.
void lora_add(const float* x, const float* a, const float* b, const int32_t* row_slots, const lora_shape& s,
              float* shrunk, float* y, thread_pool& pool);

}  // namespace actorllm::cpu
