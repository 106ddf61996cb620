// The paged KV cache's write and attention ops on the GPU (the semantics of backend::write_kv and
// backend::paged_attention; kernels/cpu/attention.hpp is the reference they are tested against). Every pointer is
// device memory; launches are asynchronous on `stream` and checked.
#pragma once

#include "kernels/kv_shard_layout.hpp"

#include "kernels/cuda/attention_plan.hpp"
#include "kernels/cuda/kv_cache_math.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// One layer's paged KV cache on the device: k and v each [n_blocks, block_size, n_head_kv, head_dim] of `type`. A
/// token's slot is block * block_size + offset_in_block. An fp8 cache holds e4m3 codes of x / scale (k_scale for k,
/// v_scale for v) and reads back code * scale; the other types ignore the scales.
struct paged_cache_view {
  void* k = nullptr;
  void* v = nullptr;
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  kv_element type = kv_element::f32;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

/// Throws std::invalid_argument naming `op` unless the view's k and v scales are positive and finite (an fp8 cache
/// divides by them).
void check_cache_scales(const paged_cache_view& cache, const char* op);

/// Writes the k and v rows of n_tokens tokens (each f32 [n_tokens, n_head_kv, head_dim]) into their slots (i64
/// [n_tokens]), rounded to the cache's type (nearest even; fp8: kvq::fp8_quantize, saturating). A negative slot is
/// skipped (padding); so is a slot past the cache (a scheduler bug the CPU backend aborts on: here it must at least
/// never write out of bounds). Throws std::invalid_argument for a bad view.
void write_kv(const paged_cache_view& cache, const float* k, const float* v, const int64_t* slots, int64_t n_tokens,
              cudaStream_t stream = nullptr);

/// Causal attention over the paged cache with the launch plan from plan_paged_attention (which fixed the window,
/// the shapes and the split): query row r at position p = positions[r] of sequence s attends to cache positions
/// [max(0, p - window + 1), p] (window <= 0: [0, p]) through s's block table; blocks wholly before the window are
/// never read, nor their table entries. GQA: query head h reads kv head h / (n_head / n_head_kv); the heads of a
/// group share every K/V load. Scores are q.k * scale, softmax in f32, K and V widened to f32 as they are loaded
/// (fp8: k_scale folded into the score scale, v_scale applied to each loaded V element).
///
/// q, out: f32 [n_tokens, n_head, head_dim] (out must not overlap q); positions: i32 [n_tokens]; seqs: i32 [n_seqs,
/// 4] (query_begin, n_query, first block-table entry, n_blocks; the same values the plan saw); block_tables: i32.
/// workspace: plan.workspace_bytes of device memory (may be null when that is 0), 4-byte aligned; its content on
/// entry does not matter.
///
/// Rows that belong to no sequence are not written. A row whose position lies outside its sequence's blocks, or
/// that meets a block id outside the cache, comes out NaN (the CPU backend aborts there) and nothing out of bounds
/// is read. Throws std::invalid_argument when the cache does not match the plan's geometry.
///
/// Decode context parallelism: with a `layout` that is not plain the cache holds only this rank's share of the
/// positions and each row attends to the keys of its window kept here (attn::local_row_range); `lse`, when given
/// ([n_tokens, n_head]), receives each (row, head)'s log-sum-exp of its scaled scores (-inf with a zero output
/// where the rank keeps none of the row's keys).
void paged_attention(const attention_plan& plan, const float* q, const int32_t* positions, const int32_t* seqs,
                     const int32_t* block_tables, const paged_cache_view& cache, float scale, float* out,
                     void* workspace, cudaStream_t stream = nullptr, const kv_shard_layout& layout = {},
                     float* lse = nullptr);

/// backend::merge_attention_partials on the device: parts [n_parts, n_tokens, n_head_all, head_dim] and lses
/// [n_parts, n_tokens, n_head_all] merged into out [n_tokens, n_head, head_dim] for heads [head_begin, head_begin +
/// n_head), parts in order (kernels/cpu's merge_attention_partials is the reference).
void merge_attention_partials(const float* parts, const float* lses, int64_t n_parts, int64_t n_tokens,
                              int64_t n_head_all, int64_t head_begin, int64_t n_head, int64_t head_dim, float* out,
                              cudaStream_t stream = nullptr);

}  // namespace actorllm::cuda
