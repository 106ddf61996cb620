// Dense matrix multiplication against Hugging Face Linear weights: the CPU backend's GEMV (decode) and GEMM
// (prefill) in one entry point.
#pragma once

#include <cstdint>

#include "kernels/dtype.hpp"
#include "util/thread_pool.hpp"

namespace actorllm::cpu {

/// Algorithm choice of matmul. `automatic` picks by n_tokens; the others exist so that tests and benchmarks can
/// drive each path on any shape.
enum class matmul_path : uint8_t {
  automatic,
  gemv,  // streams each weight row once for all tokens (bandwidth bound: decode, small batches)
  gemm,  // packs weight panels and reuses them from cache across token rows (compute bound: prefill)
};

/// Below this many tokens `automatic` uses the GEMV path (the measured crossover on an AVX-512 Xeon lies between
/// 64 and 128 tokens: below it, packing weight panels costs more than the better register reuse saves).
inline constexpr int64_t matmul_gemm_min_tokens = 96;

/// y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]) for t < n_tokens, o < n_out. x: [n_tokens, n_in] f32 row-major;
/// w: [n_out, n_in] row-major (the Hugging Face Linear layout) of type `wtype` (f32, f16 or bf16); bias: f32
/// [n_out] or null; y: [n_tokens, n_out] f32, must not overlap x. Parallel over the pool (split over n_out).
/// Accumulates in f32.
void matmul(const float* x, int64_t n_tokens, int64_t n_in, const void* w, dtype wtype, int64_t n_out,
            const float* bias, float* y, thread_pool& pool);

/// As above with an explicit algorithm.
void matmul(const float* x, int64_t n_tokens, int64_t n_in, const void* w, dtype wtype, int64_t n_out,
            const float* bias, float* y, thread_pool& pool, matmul_path path);

}  // namespace actorllm::cpu
