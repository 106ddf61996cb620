// Causal attention for the prefill chunks of a step on tensor cores (FlashAttention-2's shape with 16 x 16 x 16 MMAs
// through nvcuda::wmma): a CTA of 4 warps takes 64 query rows of one sequence and one query head, walks the keys
// of their ranges in tiles of 64 straight from the paged cache, computes S = Q K^T and O += P V on tensor cores
// and keeps an online softmax per row in shared memory. Q, K, V and the softmax weights P enter the MMAs as 16-bit
// floats (bf16, or f16 for an f16 cache); scores, softmax and O stay f32. It serves caches of 16-bit or fp8
// elements, whose values are 16-bit floats already (an f32 cache keeps the per-row kernel, whose arithmetic the
// goldens of f32 models were computed with), heads of 64 or 128, the plain layout and calls without a log-sum-exp
// output; cuda_backend runs the per-row kernel for every other row of the step and for everything else.
//
// The geometry and masking are prefill_attention_math.hpp's, tested on the CPU in the kernel's loop structure.
#pragma once

#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/prefill_attention_math.hpp"
#include "kernels/kv_shard_layout.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// Whether prefill_attention can serve a paged_attention call of this cache and head size.
inline bool prefill_attention_applies(kv_element type, int64_t head_dim, const kv_shard_layout& layout,
                                      bool wants_lse) {
  return type != kv_element::f32 && (head_dim == 64 || head_dim == 128) && layout.plain() && !wants_lse;
}

/// The 64-row tiles the grid gives each sequence: the most any of the batch's prefill sequences needs (host_seqs
/// [n_seqs * 4] as for plan_paged_attention); 0 when no sequence has prefill::min_rows query rows.
inline int64_t prefill_attention_max_tiles(const int32_t* host_seqs, int64_t n_seqs) {
  int64_t most = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int32_t n_query = host_seqs[4 * s + 1];
    if (prefill::takes_sequence(n_query) && prefill::tiles_of(n_query) > most)
      most = prefill::tiles_of(n_query);
  }
  return most;
}

/// Where each array of a CTA lives in its dynamic shared memory (bytes from the start; every array 128-byte aligned,
/// as the MMA loads want 32) for head_dim `hd`: q, k, v [64][hd + 8] 16-bit; scores [64][68] f32; weights [64][72]
/// 16-bit; out [64][hd + 4] f32; then the per-row state (max, sum, range first/last, flags) and per-key source
/// offsets. The padding keeps the rows of an MMA load on different banks.
struct prefill_smem_layout {
  int64_t ld16 = 0, ld_scores = 68, ld_weights = 72, ld_out = 0;
  int64_t q = 0, k = 0, v = 0, scores = 0, weights = 0, out = 0;
  int64_t row_max = 0, row_sum = 0, row_first = 0, row_last = 0, row_flags = 0, key_source = 0;
  int64_t bytes = 0;
};

constexpr int64_t prefill_align(int64_t n) { return (n + 127) / 128 * 128; }

constexpr prefill_smem_layout prefill_smem_layout_of(int64_t hd) {
  prefill_smem_layout l;
  l.ld16 = hd + 8;
  l.ld_out = hd + 4;
  int64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const int64_t here = at;
    at = prefill_align(at + bytes);
    return here;
  };
  l.q = take(prefill::tile_rows * l.ld16 * 2);
  l.k = take(prefill::tile_keys * l.ld16 * 2);
  l.v = take(prefill::tile_keys * l.ld16 * 2);
  l.scores = take(prefill::tile_rows * l.ld_scores * 4);
  l.weights = take(prefill::tile_rows * l.ld_weights * 2);
  l.out = take(prefill::tile_rows * l.ld_out * 4);
  l.row_max = take(prefill::tile_rows * 4);
  l.row_sum = take(prefill::tile_rows * 4);
  l.row_first = take(prefill::tile_rows * 4);
  l.row_last = take(prefill::tile_rows * 4);
  l.row_flags = take(prefill::tile_rows * 4);
  l.key_source = take(prefill::tile_keys * 8);
  l.bytes = at;
  return l;
}

/// Attention output of the rows of every sequence with at least prefill::min_rows query rows (the others, and rows
/// of no sequence, are left as they are): out [n_tokens, n_head, head_dim] f32 for q [n_tokens, n_head, head_dim]
/// f32, with the semantics of paged_attention (causal, `window` > 0 a sliding window, GQA, NaN rows for a bad
/// position or a bad block id in a row's range). max_tiles is prefill_attention_max_tiles of the host copy of
/// `seqs`; nothing is launched when it is 0. Throws std::invalid_argument when prefill_attention_applies is false
/// for the cache, or for unaligned pointers.
void prefill_attention(const float* q, const int32_t* positions, const int32_t* seqs, int64_t n_seqs, int64_t max_tiles,
                       const int32_t* block_tables, const paged_cache_view& cache, int64_t n_head, float scale,
                       int64_t window, float* out, cudaStream_t stream = nullptr);

}  // namespace actorllm::cuda
