// Rotary position embedding on the GPU, with Qwen3's per-head RMSNorm of q and k fused in front of the rotation.
// The semantics of kernels/cpu/rope.hpp (HF rotate_half layout); angles are taken in double, as on the CPU.
#pragma once

#include "kernels/cuda/element_type.hpp"
#include "kernels/cuda/paged_attention.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// Rotates q [n_tokens, n_head, head_dim] and k [n_tokens, n_head_kv, head_dim] (k may be null with n_head_kv 0) in
/// place by positions[t], with inv_freq [head_dim / 2] (device pointers). When q_norm / k_norm are non-null (both
/// of `norm_type`, [head_dim]), each head is first RMS-normalised with them and eps.
void rope(const float* inv_freq, int64_t head_dim, const int32_t* positions, int64_t n_tokens, float* q, int64_t n_head,
          float* k, int64_t n_head_kv, const void* q_norm, const void* k_norm, element_type norm_type, float eps,
          cudaStream_t stream);

/// rope of q and k as above (k not null), and each rotated k row and v's row (f32 [n_tokens, n_head_kv, head_dim])
/// written to the cache at slots[t] as write_kv writes them (the same rounding; a negative slot or one past the cache
/// skipped): one launch for both.
void rope_write_kv(const float* inv_freq, int64_t head_dim, const int32_t* positions, int64_t n_tokens, float* q,
                   int64_t n_head, float* k, int64_t n_head_kv, const void* q_norm, const void* k_norm,
                   element_type norm_type, float eps, const paged_cache_view& cache, const float* v,
                   const int64_t* slots, cudaStream_t stream);

}  // namespace actorllm::cuda
