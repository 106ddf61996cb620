// RoPE: one warp per (token, head); a lane owns the pairs (i, i + head_dim / 2) it rotates, so the optional head
// norm (a warp-wide sum of squares) is the only exchange between lanes. rope_write_kv: the same kernel, whose k-head
// warps also write the rotated k and the v of their head to the token's cache slot as write_kv would.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/kv_element.cuh"
#include "kernels/cuda/launch_geometry.hpp"
#include "kernels/cuda/rope.hpp"

#include <stdexcept>
#include <type_traits>

namespace actorllm::cuda {
namespace {

constexpr double inv_pi = 0.318309886183790671537767526745028724;  // 1 / pi, rounded to double

// Where a k head's rows go in the cache besides the rotation (T = void: nowhere, plain rope).
struct cache_write {
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const float* v = nullptr;
  const int64_t* slots = nullptr;
  int64_t capacity = 0;  // slots in the cache
  float k_scale = 1.0f, v_scale = 1.0f;
};

template <class W, class T>
__global__ void __launch_bounds__(32 * head_warps_per_block)
    rope_kernel(const float* __restrict__ inv_freq, int64_t head_dim, const int32_t* __restrict__ positions,
                int64_t n_tokens, float* q, int64_t n_head, float* k, int64_t n_head_kv, const W* q_norm,
                const W* k_norm, float eps, const cache_write cw) {
  const int64_t heads = n_head + n_head_kv;
  const int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (item >= n_tokens * heads)
    return;  // item is the same for the whole warp, so warps leave whole
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = item / heads, h = item % heads;
  float* v = h < n_head ? q + (t * n_head + h) * head_dim : k + (t * n_head_kv + (h - n_head)) * head_dim;
  const W* norm = h < n_head ? q_norm : k_norm;
  // A k head's cache rows (the fused rope_write_kv): its slot's k and v for this head, or none.
  T* k_dst = nullptr;
  T* v_dst = nullptr;
  if constexpr (!std::is_void_v<T>) {
    const int64_t slot = h >= n_head ? cw.slots[t] : -1;
    if (slot >= 0 && slot < cw.capacity) {
      const int64_t at = (slot * n_head_kv + (h - n_head)) * head_dim;
      k_dst = static_cast<T*>(cw.k_cache) + at;
      v_dst = static_cast<T*>(cw.v_cache) + at;
      const float* v_src = cw.v + (t * n_head_kv + (h - n_head)) * head_dim;
      for (int64_t i = lane; i < head_dim; i += 32)
        v_dst[i] = kv_from_f32<T>(v_src[i], cw.v_scale);
    }
  }
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
    const float lo = a * cs - b * sn, hi = b * cs + a * sn;
    v[i] = lo;
    v[i + half] = hi;
    if constexpr (!std::is_void_v<T>) {
      if (k_dst != nullptr) {
        k_dst[i] = kv_from_f32<T>(lo, cw.k_scale);
        k_dst[i + half] = kv_from_f32<T>(hi, cw.k_scale);
      }
    }
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
    rope_kernel<W, void><<<g.blocks, g.threads, 0, stream>>>(
        inv_freq, head_dim, positions, n_tokens, q, n_head, k, k != nullptr ? n_head_kv : 0,
        static_cast<const W*>(q_norm), static_cast<const W*>(k_norm), eps, cache_write{});
  });
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

void rope_write_kv(const float* inv_freq, int64_t head_dim, const int32_t* positions, int64_t n_tokens, float* q,
                   int64_t n_head, float* k, int64_t n_head_kv, const void* q_norm, const void* k_norm,
                   element_type norm_type, float eps, const paged_cache_view& cache, const float* v,
                   const int64_t* slots, cudaStream_t stream) {
  if (k == nullptr || v == nullptr || slots == nullptr || cache.k == nullptr || cache.v == nullptr)
    throw std::invalid_argument("rope_write_kv: null pointer");
  if (cache.n_head_kv != n_head_kv || cache.head_dim != head_dim)
    throw std::invalid_argument("rope_write_kv: k's heads do not match the cache's");
  check_cache_scales(cache, "rope_write_kv");
  const grid_1d g = warp_per_item_grid(n_tokens * (n_head + n_head_kv));
  if (g.blocks == 0 || head_dim <= 0)
    return;
  const cache_write cw{cache.k, cache.v, v, slots, cache.n_blocks * cache.block_size, cache.k_scale, cache.v_scale};
  dispatch_element(norm_type, [&](auto tag) {
    using W = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    dispatch_kv_element(cache.type, [&](const auto* cache_tag) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(cache_tag)>>;
      rope_kernel<W, T><<<g.blocks, g.threads, 0, stream>>>(inv_freq, head_dim, positions, n_tokens, q, n_head, k,
                                                            n_head_kv, static_cast<const W*>(q_norm),
                                                            static_cast<const W*>(k_norm), eps, cw);
    });
  });
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace actorllm::cuda
