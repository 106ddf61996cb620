// Paged attention for heads narrower than a warp (head_dim < 32: toy models such as stories260K, head_dim 8), which
// the main kernel (paged_attention.cu: each lane holds head_dim / 32 elements) does not cover. Same semantics as
// paged_attention(); simple rather than fast: one warp per (query row, query head), the lanes taking every 32nd
// cache position with their own online softmax, merged by warp shuffles at the end.
#pragma once

#include "kernels/kv_shard_layout.hpp"

#include "kernels/cuda/paged_attention.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// Heads this kernel takes: 1 <= head_dim <= small_head_dim_max.
inline constexpr int64_t small_head_dim_max = 31;

/// q, out: f32 [n_tokens, n_head, head_dim]; seqs: i32 [n_seqs, 4] (device); positions, block_tables: i32 (device).
/// Rows that belong to no sequence are not written; a row whose position lies outside its sequence's blocks or that
/// meets a block id outside the cache comes out NaN. Throws std::invalid_argument for a head_dim it does not take.
void paged_attention_small_heads(const float* q, const int32_t* positions, const int32_t* seqs, int64_t n_seqs,
                                 const int32_t* block_tables, const paged_cache_view& cache, int64_t n_tokens,
                                 int64_t n_head, float scale, int64_t window, float* out, cudaStream_t stream,
                                 const kv_shard_layout& layout = {}, float* lse = nullptr);

}  // namespace actorllm::cuda
