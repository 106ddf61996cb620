// Bulk element-type conversion of contiguous buffers (weights to f32 for packing, embedding rows, test data).
#pragma once

#include <cstdint>

#include "kernels/dtype.hpp"

namespace actorllm::cpu {

/// dst[i] = src[i] as float for i < n; src holds elements of type `stype`. Vectorised; exact for every input
/// (every f16 and bf16 value is representable as f32).
void convert_to_f32(const void* src, dtype stype, int64_t n, float* dst);

/// dst[i] = src[i] rounded to `dtype` (round-to-nearest-even, NaN stays NaN) for i < n. Vectorised for bf16 and
/// f16 (the KV cache's writes), with the scalar conversions' results bit for bit (for f16, NaN payloads aside: a NaN
/// stays a NaN).
void convert_from_f32(const float* src, int64_t n, dtype dtype_out, void* dst);

}  // namespace actorllm::cpu
