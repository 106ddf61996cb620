// RoPE: one warp per (token, head); a lane owns the pairs (i, i + head_dim / 2) it rotates, so the optional head
// norm (a warp-wide sum of squares) is the only exchange between lanes.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch_geometry.hpp"
#include "kernels/cuda/rope.hpp"

#include <type_traits>

namespace actorllm::cuda {
namespace {

constexpr double inv_pi = 0.318309886183790671537767526745028724;  // 1 / pi, rounded to double

template <class W>
__global__ void __launch_bounds__(32 * head_warps_per_block)
    rope_kernel(const float* __restrict__ inv_freq, int64_t head_dim, const int32_t* __restrict__ positions,
                int64_t n_tokens, float* q, int64_t n_head, float* k, int64_t n_head_kv, const W* q_norm,
                const W* k_norm, float eps) {
  const int64_t heads = n_head + n_head_kv;
  const int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (item >= n_tokens * heads)
    return;  // item is the same for the whole warp, so warps leave whole
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = item / heads, h = item % heads;
  float* v = h < n_head ? q + (t * n_head + h) * head_dim : k + (t * n_head_kv + (h - n_head)) * head_dim;
  const W* norm = h < n_head ? q_norm : k_norm;
  float inv = 1.0f;
  if (norm != nullptr) {
    float sum = 0.0f;
    for (int64_t i = lane; i < head_dim; i += 32)
      sum += v[i] * v[i];
    sum = warp_sum(sum);
    inv = 1.0f / sqrtf(sum / static_cast<float>(head_dim) + eps);
  }
  const int64_t half = head_dim / 2;
  const double pos = static_cast<double>(positions[t]);
  for (int64_t i = lane; i < half; i += 32) {
    float a = v[i], b = v[i + half];
    if (norm != nullptr) {
      a = a * inv * to_f32(norm[i]);
      b = b * inv * to_f32(norm[i + half]);
    }
    // sincospi, not sincos: the angle in half turns reduces exactly, where double sincos carries a Payne-Hanek
    // reduction for huge arguments whose table lives in local memory (a 40-byte stack frame, which the build
    // refuses). Dividing by pi first costs an angle error of ~1e-16 relative, far below the f32 result's rounding.
    double s = 0.0, c = 0.0;
    sincospi(pos * static_cast<double>(inv_freq[i]) * inv_pi, &s, &c);
    const float cs = static_cast<float>(c), sn = static_cast<float>(s);
    v[i] = a * cs - b * sn;
    v[i + half] = b * cs + a * sn;
  }
}

}  // namespace

void rope(const float* inv_freq, int64_t head_dim, const int32_t* positions, int64_t n_tokens, float* q, int64_t n_head,
          float* k, int64_t n_head_kv, const void* q_norm, const void* k_norm, element_type norm_type, float eps,
          cudaStream_t stream) {
  const grid_1d g = warp_per_item_grid(n_tokens * (n_head + (k != nullptr ? n_head_kv : 0)));
  if (g.blocks == 0 || head_dim <= 0)
    return;
  dispatch_element(norm_type, [&](auto tag) {
    using W = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    rope_kernel<W><<<g.blocks, g.threads, 0, stream>>>(inv_freq, head_dim, positions, n_tokens, q, n_head, k,
                                                       k != nullptr ? n_head_kv : 0, static_cast<const W*>(q_norm),
                                                       static_cast<const W*>(k_norm), eps);
  });
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace actorllm::cuda
