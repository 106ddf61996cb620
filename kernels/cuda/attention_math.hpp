// The arithmetic of the CUDA paged attention as __host__ __device__ functions: the kernels in paged_attention.cu
// call exactly these, and tests/kernels/cuda/attention_math_test.cpp runs them on the CPU in the kernels' loop
// structure against kernels/cpu, so the kernels' math is tested without a GPU.
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels/cuda/host_device.hpp"
#include "kernels/kv_shard_layout.hpp"

namespace actorllm::cuda::attn {

// ---- online softmax --------------------------------------------------------------------------------------------

/// Running max and sum of exp(score - max) of one query head over the positions seen so far.
struct softmax_state {
  float max;
  float sum;
};

/// Before any position: max -inf, sum 0.
ACTORLLM_HOST_DEVICE inline softmax_state softmax_start() { return {-INFINITY, 0.0f}; }

/// Takes a tile whose largest score is tile_max: raises the running max and rescales the running sum to it.
/// Returns the factor the accumulated output must be multiplied by (1 while the max stays -inf, so an empty start
/// never produces exp(-inf - -inf) = NaN). A NaN score (a bad block id) is ignored by fmaxf here but poisons the
/// sum through softmax_weight, so such a row comes out NaN rather than quietly wrong.
ACTORLLM_HOST_DEVICE inline float softmax_rescale(softmax_state& s, float tile_max) {
  const float new_max = fmaxf(s.max, tile_max);
  const float correction = new_max == -INFINITY ? 1.0f : expf(s.max - new_max);
  s.max = new_max;
  s.sum *= correction;
  return correction;
}

/// The unnormalised softmax weight of a score under the current max (after softmax_rescale of its tile).
ACTORLLM_HOST_DEVICE inline float softmax_weight(const softmax_state& s, float score) { return expf(score - s.max); }

// ---- split-K merge ---------------------------------------------------------------------------------------------

/// The factor by which a partition's (unnormalised) accumulator and sum enter the merged result, given the max
/// over all partitions of the row: exp(part_max - global_max), 0 for a partition that saw nothing.
ACTORLLM_HOST_DEVICE inline float partition_weight(float part_max, float global_max) {
  return part_max == -INFINITY ? 0.0f : expf(part_max - global_max);
}

// ---- which cache positions a query row reads -------------------------------------------------------------------

/// The cache positions [first, last] a query row at `position` reads, in a sequence owning n_seq_blocks blocks.
/// valid is false when the position is negative or past the sequence's blocks (the CPU aborts there; the kernels
/// write NaN rows instead of reading out of bounds). Positions are i32 in the batch, so the index arithmetic below
/// is 32-bit: a 64-bit division is a slow subroutine call on the GPU.
struct row_range {
  int32_t first;
  int32_t last;
  bool valid;
};

/// Causal with an optional sliding window (> 0): [max(0, position - window + 1), position].
ACTORLLM_HOST_DEVICE inline row_range query_row_range(int32_t position, int64_t window, int64_t n_seq_blocks,
                                                      int64_t block_size) {
  row_range r;
  r.last = position;
  r.first = window > 0 && position - window + 1 > 0 ? static_cast<int32_t>(position - window + 1) : 0;
  r.valid = position >= 0 && position < n_seq_blocks * block_size;
  return r;
}

/// Under decode context parallelism (kv_shard_layout) the kernels walk the rank's local key indices instead of
/// positions (local index i lives at block-table entry i / block_size, offset i % block_size): the local indices of
/// the positions of `r` this rank keeps, [local_count(first), local_count(last + 1) - 1], empty (last < first) when
/// it keeps none of them. Valid when the position is not negative and its local indices fit the sequence's blocks.
/// The plain layout returns `r` as it is.
ACTORLLM_HOST_DEVICE inline row_range local_row_range(const row_range& r, int32_t position, const kv_shard_layout& l,
                                                      int64_t n_seq_blocks, int64_t block_size) {
  if (l.plain())
    return r;
  row_range out;
  out.first = static_cast<int32_t>(l.local_count(r.first));
  out.last = static_cast<int32_t>(l.local_count(static_cast<int64_t>(r.last) + 1) - 1);
  out.valid = position >= 0 && l.local_count(static_cast<int64_t>(position) + 1) <= n_seq_blocks * block_size;
  return out;
}

/// Whether a row's range holds no key (a DCP rank that keeps none of its window's positions).
ACTORLLM_HOST_DEVICE inline bool range_empty(const row_range& r) { return r.last < r.first; }

/// The first block-table entry the row reads (blocks before it lie wholly outside the window).
ACTORLLM_HOST_DEVICE inline int32_t first_block(const row_range& r, int32_t block_size) { return r.first / block_size; }

/// Partitions of partition_size positions covering the row's range, counted from its first position.
ACTORLLM_HOST_DEVICE inline int32_t partition_count(const row_range& r, int32_t partition_size) {
  return static_cast<int32_t>((static_cast<int64_t>(r.last) - r.first + partition_size) / partition_size);
}

/// Positions [begin, end) of partition `part` of the row (empty, begin >= end, past the row's last partition).
struct position_span {
  int32_t begin;
  int32_t end;
};

ACTORLLM_HOST_DEVICE inline position_span partition_span(const row_range& r, int32_t part, int32_t partition_size) {
  const int64_t begin = r.first + static_cast<int64_t>(part) * partition_size;
  const int64_t end = begin + partition_size < static_cast<int64_t>(r.last) + 1 ? begin + partition_size : r.last + 1;
  position_span s;
  s.begin = begin < end ? static_cast<int32_t>(begin) : 0;
  s.end = begin < end ? static_cast<int32_t>(end) : 0;
  return s;
}

// ---- heads and cache addressing --------------------------------------------------------------------------------

/// The query heads [first_head, first_head + n_heads) one CTA runs against kv_head: grid y = kv_head *
/// n_head_chunks + chunk, each chunk up to head_chunk heads of the GQA group (query head h reads kv head
/// h / (n_head / n_head_kv)). Head counts are below 65536 (the plan checks), so 32-bit.
struct head_group {
  int32_t kv_head;
  int32_t first_head;
  int32_t n_heads;
};

ACTORLLM_HOST_DEVICE inline head_group head_group_of(int32_t grid_y, int32_t n_head, int32_t n_head_kv,
                                                     int32_t head_chunk) {
  const int32_t n_rep = n_head / n_head_kv;
  const int32_t n_chunks = (n_rep + head_chunk - 1) / head_chunk;
  head_group g;
  g.kv_head = grid_y / n_chunks;
  const int32_t begin = (grid_y - g.kv_head * n_chunks) * head_chunk;
  g.first_head = g.kv_head * n_rep + begin;
  g.n_heads = n_rep - begin < head_chunk ? n_rep - begin : head_chunk;
  return g;
}

/// The kv head query head h reads.
ACTORLLM_HOST_DEVICE inline int32_t kv_head_of(int32_t head, int32_t n_head, int32_t n_head_kv) {
  return head / (n_head / n_head_kv);
}

/// Whether query row `row` belongs to the sequence whose seqs entry is `seq` (query_begin, n_query, ...).
ACTORLLM_HOST_DEVICE inline bool row_in_sequence(const int32_t* seq, int64_t row) {
  return row >= seq[0] && row < static_cast<int64_t>(seq[0]) + seq[1];
}

/// Where a cache position lives: the index of its block-table entry and its offset inside that block. 32-bit on
/// purpose (positions are i32): a 64-bit division is a slow subroutine call on the GPU.
struct block_slot {
  int32_t table_index;
  int32_t offset;
};

ACTORLLM_HOST_DEVICE inline block_slot block_slot_of(int32_t position, int32_t block_size) {
  const int32_t index = position / block_size;
  return {index, position - index * block_size};
}

/// Element offset of (block, offset in block, kv_head, 0) in a cache [n_blocks, block_size, n_head_kv, head_dim].
ACTORLLM_HOST_DEVICE inline int64_t cache_offset(int64_t block, int32_t offset, int64_t block_size, int64_t n_head_kv,
                                                 int64_t kv_head, int64_t head_dim) {
  return ((block * block_size + offset) * n_head_kv + kv_head) * head_dim;
}

/// Whether a block id read from a block table lies inside the cache (a bad one yields a NaN row, never a read).
ACTORLLM_HOST_DEVICE inline bool block_in_cache(int64_t block, int64_t cache_blocks) {
  return block >= 0 && block < cache_blocks;
}

}  // namespace actorllm::cuda::attn
