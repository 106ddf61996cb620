// Causal attention over a paged KV cache (vLLM's PagedAttention layout), for batches that mix prefill chunks and
// decode tokens.
#pragma once

#include <cstdint>

#include "kernels/dtype.hpp"
#include "kernels/kv_shard_layout.hpp"
#include "util/thread_pool.hpp"

namespace actorllm::cpu {

/// One layer's paged KV cache: k and v each [n_blocks, block_size, n_head_kv, head_dim] of `type` (f32, bf16 or
/// f16: --kv-cache-dtype), or with `heads_outer` [n_blocks, n_head_kv, block_size, head_dim]. A token's slot is block *
/// block_size + offset_in_block.
///
/// Heads outer is what the CPU backend allocates: a decode row's attention reads one kv head's keys and values, which
/// are then runs of block_size rows rather than one row of every n_head_kv. One layer of TinyLlama's heads, bf16 cache,
/// the caches evicted before each call, alternated with the slot-by-slot layout on a 2-vCPU Zen 5 VM (8 pairs each):
/// 32 rows at 512 positions 0.84x the time, 8 rows at 1,024 0.83x, one row at 2,048 0.79x; prefill 512 and 2,048
/// tokens 0.985x and 0.963x (a throw-away build with the same addressing).
struct paged_kv_view {
  void* k;
  void* v;
  int64_t n_blocks;
  int64_t block_size;
  int64_t n_head_kv;
  int64_t head_dim;
  dtype type = dtype::f32;
  bool heads_outer = false;

  /// Element offset of kv head g's row at `offset` in block `block`, in k or v.
  int64_t row_at(int64_t block, int64_t offset, int64_t g) const {
    return heads_outer ? ((block * n_head_kv + g) * block_size + offset) * head_dim
                       : ((block * block_size + offset) * n_head_kv + g) * head_dim;
  }
  /// Elements from a row of a block to the next row of the same kv head.
  int64_t block_row_stride() const { return heads_outer ? head_dim : n_head_kv * head_dim; }
  /// The same for cache slot `slot` (block * block_size + offset).
  int64_t row_of_slot(int64_t slot, int64_t g) const { return row_at(slot / block_size, slot % block_size, g); }
};

/// Writes the k/v rows of new tokens (each f32 [n_tokens, n_head_kv, head_dim]) into their slots, rounded to the
/// cache's type (nearest even); slot_mapping[t] < 0 skips token t (padding). A slot past the cache aborts (it would
/// be a scheduler bug).
void write_kv(const paged_kv_view& cache, const float* k, const float* v, const int64_t* slot_mapping,
              int64_t n_tokens);

/// One sequence of a flattened batch: its query rows are [query_begin, query_begin + n_query) of q/out; its cache
/// blocks, in position order, are block_table[0 .. n_blocks).
struct attention_seq {
  int32_t query_begin;
  int32_t n_query;
  const int32_t* block_table;
  int32_t n_blocks;
};

/// What paged_attention's work items do first for a batch of decode rows (each sequence one query row): for its row
/// and kv head, an item applies the per-head q/k norms (Qwen3; null: none), rotates the row's query heads of that kv
/// head and the kv head's key by the row's angles (rope_angles), and writes the key and value into the row's slot
/// (< 0: not written), rounded to the cache's type. The same numbers as rope, then write_kv, then paged_attention;
/// the item then reads its own new key, and no thread first runs over every head of the step alone.
struct decode_rope_write {
  float* q;        ///< [n_tokens, n_head, head_dim]: the q paged_attention reads, rotated in place
  float* k;        ///< f32 [n_tokens, n_head_kv, head_dim], rotated in place
  const float* v;  ///< f32 [n_tokens, n_head_kv, head_dim]
  const int64_t* slots;
  const float* cos;  ///< [n_tokens, head_dim / 2]: each row's rope_angles
  const float* sin;
  const void* q_norm = nullptr;  ///< [head_dim] of q_norm_type, or null
  dtype q_norm_type = dtype::f32;
  const void* k_norm = nullptr;
  dtype k_norm_type = dtype::f32;
  float eps = 0;
};

/// Causal attention over the paged cache for prefill chunks and decode tokens in one batch: query row r (at
/// position p = positions[r]) of sequence s attends to cache positions [0, p] of s, or with a sliding window
/// (window > 0) to [max(0, p - window + 1), p] (transformers' sliding_window: kv_idx > q_idx - window). The new
/// tokens' k/v must already be written. Blocks that lie wholly before a row's window are skipped, their
/// block-table entries not even read (a scheduler may have freed them); a window that starts inside a block reads
/// that block from the window start on. GQA: query head h uses kv head h / (n_head / n_head_kv). q, out:
/// [n_tokens, n_head, head_dim] f32; scores are q.k * scale. Online softmax over cache blocks (running max and
/// sum, rescaled per step of keys), f32 accumulation; a bf16 or f16 cache is widened to f32 (exactly) as each step's
/// keys and values are loaded. Parallel over (sequence, tile of up to 4 query rows, kv head)
/// work items, each covering the n_head / n_head_kv query heads that share a kv head, so every k/v row is loaded
/// (and the keys transposed for lane-parallel scores) once for all the tile's rows and heads.
///
/// Under decode context parallelism (`layout` not plain) the cache holds only this rank's share of the positions
/// and a row attends to the keys of its window that are here; `lse`, when given ([n_tokens, n_head]), receives each
/// (row, head)'s log-sum-exp of its scores (-inf, with a zero output, when it sees no key here), which
/// merge_attention_partials needs to combine the ranks' outputs exactly.
void paged_attention(const float* q, const int32_t* positions, const attention_seq* seqs, int64_t n_seqs,
                     const paged_kv_view& cache, int64_t n_head, float scale, float* out, thread_pool& pool,
                     int64_t window = 0, const kv_shard_layout& layout = {}, float* lse = nullptr,
                     const decode_rope_write* rope_write = nullptr);

/// The exact softmax merge of attention outputs computed over disjoint shares of the keys (split-K, or the ranks of
/// a DCP group): for each row t and head h in [head_begin, head_begin + n_head), out[t, h - head_begin] = sum over
/// parts p of exp(lse_p - m) out_p / sum over p of exp(lse_p - m), m the largest lse_p. parts: [n_parts, n_tokens,
/// n_head_all, head_dim]; lses: [n_parts, n_tokens, n_head_all]; out: [n_tokens, n_head, head_dim]. Parts are summed
/// in order, so the result does not depend on threads. Only rows [row_begin, row_end) are written (row_end < 0: to
/// the last), so that threads can share the rows.
void merge_attention_partials(const float* parts, const float* lses, int64_t n_parts, int64_t n_tokens,
                              int64_t n_head_all, int64_t head_begin, int64_t n_head, int64_t head_dim, float* out,
                              int64_t row_begin = 0, int64_t row_end = -1);

}  // namespace actorllm::cpu
