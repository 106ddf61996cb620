// The batched multi-LoRA update on the GPU (backend::lora_add): a shrink kernel (shrunk[t] = a[s] x[t]) and an
// expand kernel (y[t] += b[s] shrunk[t]) on one stream, each row with its own adapter slot. The per-element
// arithmetic is lora_math.hpp's, which the CPU tests run too.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// The sizes of one lora_add call (backend::lora_add names them).
struct lora_dims {
  int64_t n = 0, n_in = 0, n_out = 0, n_slots = 0, rank = 0;
};

/// For every row t whose slot s = row_slots[t] lies in [0, n_slots): shrunk[t] = a[s] x[t], then y[t] += b[s]
/// shrunk[t] (device pointers; shapes as backend::lora_add). Rows with any other slot are left untouched, y and
/// shrunk alike: negative means no adapter, and one at or past n_slots (which the host cannot see without a
/// synchronisation) is skipped rather than read out of bounds. Two launches on `stream`, no allocation and no
/// synchronisation, so a CUDA graph can capture them.
void lora_add(const float* x, const float* a, const float* b, const int32_t* row_slots, const lora_dims& d,
              float* shrunk, float* y, cudaStream_t stream);

}  // namespace actorllm::cuda
