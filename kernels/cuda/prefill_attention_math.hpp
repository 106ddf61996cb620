// The arithmetic and geometry of the tensor-core prefill attention (prefill_attention.cu) as __host__ __device__
// functions: which sequences it takes, which CTA runs which 64-row tile, which keys a tile loads, and how a score
// is masked. The kernel calls exactly these; tests/kernels/cuda/prefill_attention_math_test.cpp runs them on the CPU
// in the kernel's loop structure (with the same roundings of q, k, v and the softmax weights to 16 bits) against
// kernels/cpu's paged attention.
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels/cuda/attention_math.hpp"
#include "kernels/cuda/host_device.hpp"

namespace actorllm::cuda::prefill {

/// Query rows per CTA tile and keys per inner tile (the two GEMMs are 64 x 64 x head_dim on 16 x 16 x 16 MMAs).
inline constexpr int32_t tile_rows = 64;
inline constexpr int32_t tile_keys = 64;
/// A sequence with at least this many query rows in the step (a prefill chunk) takes the tensor-core kernel; rows of
/// shorter ones (decode tokens, short chunks) stay with the per-row kernel, which splits long contexts instead.
inline constexpr int32_t min_rows = 16;
/// Threads per CTA: 4 warps, each owning 16 of the tile's query rows.
inline constexpr int32_t threads = 128;

/// Whether a sequence with `n_query` rows this step is the prefill kernel's.
ACTORLLM_HOST_DEVICE inline bool takes_sequence(int32_t n_query) { return n_query >= min_rows; }

/// 64-row tiles of a sequence's query rows.
ACTORLLM_HOST_DEVICE inline int32_t tiles_of(int32_t n_query) { return (n_query + tile_rows - 1) / tile_rows; }

/// The query rows one CTA runs: grid x = sequence * max_tiles + tile. Empty (n_rows 0) when the sequence is not the
/// prefill kernel's or the tile lies past its rows.
struct row_tile {
  int32_t seq;
  int32_t first_row;  ///< batch row of the tile's first query row
  int32_t n_rows;     ///< 1..64, or 0: nothing to do
};

ACTORLLM_HOST_DEVICE inline row_tile row_tile_of(int32_t grid_x, int32_t max_tiles, const int32_t* seqs) {
  row_tile t;
  t.seq = grid_x / max_tiles;
  const int32_t tile = grid_x - t.seq * max_tiles;
  const int32_t* s = seqs + 4 * static_cast<int64_t>(t.seq);
  const int32_t n_query = s[1];
  const int32_t begin = tile * tile_rows;
  t.first_row = s[0] + begin;
  t.n_rows =
      takes_sequence(n_query) && begin < n_query ? (n_query - begin < tile_rows ? n_query - begin : tile_rows) : 0;
  return t;
}

/// The keys a tile of rows loads: [first, last], the union of its valid rows' ranges (empty, last < first, when no
/// row is valid). Keys outside it are never read, nor their block-table entries (a window's old blocks may be
/// freed); a key inside it lies in some row's range.
struct key_span {
  int32_t first;
  int32_t last;
};

ACTORLLM_HOST_DEVICE inline key_span key_span_empty() { return {INT32_MAX, -1}; }

ACTORLLM_HOST_DEVICE inline void key_span_add(key_span& s, const attn::row_range& r) {
  if (!r.valid)
    return;
  s.first = r.first < s.first ? r.first : s.first;
  s.last = r.last > s.last ? r.last : s.last;
}

/// The first key of the 64-key tiles that cover a span (aligned down to a multiple of 64).
ACTORLLM_HOST_DEVICE inline int32_t first_key_tile(const key_span& s) { return s.first / tile_keys * tile_keys; }

/// Whether key `k` is loaded: inside the span (keys of a tile before it, or past it, are zero and masked).
ACTORLLM_HOST_DEVICE inline bool key_loaded(int32_t k, const key_span& s) { return k >= s.first && k <= s.last; }

/// The score of query row `r` for key `k` (q.k already scaled): itself inside the row's range, -inf outside (the
/// causal mask and the window).
ACTORLLM_HOST_DEVICE inline float masked_score(float score, int32_t k, const attn::row_range& r) {
  return r.valid && k >= r.first && k <= r.last ? score : -INFINITY;
}

/// Whether a bad key (a block id outside the cache) spoils row `r`: it lies in the row's range. Such a row comes out
/// NaN, as the per-row kernel's does.
ACTORLLM_HOST_DEVICE inline bool spoils_row(int32_t k, const attn::row_range& r) {
  return r.valid && k >= r.first && k <= r.last;
}

}  // namespace actorllm::cuda::prefill
