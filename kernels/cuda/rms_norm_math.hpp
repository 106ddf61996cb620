// The RMSNorm kernels' arithmetic (kernels/cuda/rms_norm.cu) as __host__ __device__ functions: which elements each
// thread of the row's block takes, the order of its sum of squares, the block's reduction tree, and the scaling. The
// kernel calls exactly these; tests/kernels/cuda/rms_norm_math_test.cpp runs a block's threads on the CPU
// (emulate_row) against float64. A C++17 header (nvcc compiles .cu files as C++17).
//
// One block per row, row_launch_of(width) threads (launch_geometry.hpp). Thread t takes the vectors of `vector`
// consecutive elements starting at t * vector, t * vector + threads * vector, ... (pass p = 0, 1, ...), adds the
// delta into the residual there (add_rms_norm), and folds each element into its sum of squares with an fma, in
// element order. The threads' sums meet as block_sum does: a butterfly within each warp, then warp 0 sums the warps'
// totals (lanes past the last warp adding 0) with another butterfly. Each element is then v * inv * w, inv =
// 1 / sqrt(total / width + eps) with IEEE sqrt and divide (the CPU's). A row of up to max_cached_passes passes keeps
// its values in registers between the sum and the scaling; a wider one rereads them.
#pragma once

#include "kernels/cuda/host_device.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace actorllm::cuda::norm {

/// The most passes a thread keeps in registers (4 vectors of 4: 16 floats per thread, up to 16384 wide rows).
inline constexpr int max_cached_passes = 4;  // launch_geometry.hpp: row_cached_passes_max

/// A thread's sum of squares after one more element.
ACTORLLM_HOST_DEVICE inline float fold_square(float v, float sum) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(v, v, sum);
#else
  return std::fma(v, v, sum);
#endif
}

/// 1 / sqrt(mean square + eps), rounded as the CPU rounds it (IEEE sqrt, then an IEEE divide).
ACTORLLM_HOST_DEVICE inline float inverse_rms(float total, int64_t width, float eps) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(1.0f, __fsqrt_rn(__fdiv_rn(total, static_cast<float>(width)) + eps));
#else
  return 1.0f / std::sqrt(total / static_cast<float>(width) + eps);
#endif
}

/// One normalised element: (v * inv) * w.
ACTORLLM_HOST_DEVICE inline float scaled(float v, float inv, float w) { return v * inv * w; }

/// Passes of `threads` threads over a row of `width` elements taken `vector` at a time.
ACTORLLM_HOST_DEVICE constexpr int64_t passes_of(int64_t width, int threads, int vector) {
  const int64_t per_pass = static_cast<int64_t>(threads) * vector;
  return (width + per_pass - 1) / per_pass;
}

/// The block_sum tree (device_math.cuh) over the threads' partial sums, on the CPU: butterflies within each warp,
/// then over the warps' totals.
inline float emulate_block_sum(std::vector<float> partial) {
  const auto butterfly = [](float* lanes) {
    for (int offset = 16; offset > 0; offset /= 2) {
      float next[32];
      for (int l = 0; l < 32; ++l)
        next[l] = lanes[l] + lanes[l ^ offset];
      for (int l = 0; l < 32; ++l)
        lanes[l] = next[l];
    }
    return lanes[0];
  };
  const size_t n_warps = partial.size() / 32;
  float warps[32] = {};
  for (size_t w = 0; w < n_warps; ++w)
    warps[w] = butterfly(partial.data() + 32 * w);
  return butterfly(warps);
}

/// add_rms_norm of one row as the kernel computes it, on the CPU: residual += delta (delta null: plain RMSNorm of
/// residual, left as it is), then out = the normalised row (f32; a bf16 output is this rounded). weight as f32.
inline void emulate_row(float* residual, const float* delta, int64_t width, const float* weight, float eps, int threads,
                        int vector, float* out) {
  std::vector<float> partial(static_cast<size_t>(threads), 0.0f);
  for (int t = 0; t < threads; ++t)
    for (int64_t p = 0; p < passes_of(width, threads, vector); ++p) {
      const int64_t first = (p * threads + t) * vector;
      for (int k = 0; k < vector && first + k < width; ++k) {
        const int64_t i = first + k;
        if (delta != nullptr)
          residual[i] = delta[i] + residual[i];
        partial[static_cast<size_t>(t)] = fold_square(residual[i], partial[static_cast<size_t>(t)]);
      }
    }
  const float inv = inverse_rms(emulate_block_sum(std::move(partial)), width, eps);
  for (int64_t i = 0; i < width; ++i)
    out[i] = scaled(residual[i], inv, weight[i]);
}

}  // namespace actorllm::cuda::norm
