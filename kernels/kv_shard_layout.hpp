// Which of a sequence's positions one rank keeps in its KV cache under decode context parallelism (vLLM's -dcp): the
// positions are dealt out to the n_shards ranks of a DCP group in runs of `interleave` tokens, round robin, so a
// growing sequence fills every rank's blocks evenly. With one shard a rank keeps every position (the plain layout).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ACTORLLM_KV_LAYOUT_FN __host__ __device__ inline
#else
#define ACTORLLM_KV_LAYOUT_FN inline
#endif

namespace actorllm {

/// A rank's share of the positions. Position p belongs to shard (p / interleave) % n_shards; the positions a shard
/// keeps are numbered 0, 1, 2, ... in position order (their local index), and local index i lives in the sequence's
/// block i / block_size at offset i % block_size of this rank's cache, whose blocks hold block_size tokens. The
/// scheduler's blocks hold block_size * n_shards positions (a virtual block): virtual block b is block b of every
/// rank, each holding its share of the b-th run of block_size * n_shards positions. Needs block_size % interleave == 0.
struct kv_shard_layout {
  int32_t n_shards = 1;    ///< ranks of the DCP group (1: every position here)
  int32_t shard = 0;       ///< this rank's index in the group, in [0, n_shards)
  int32_t interleave = 1;  ///< consecutive positions a rank keeps before the next rank's run

  ACTORLLM_KV_LAYOUT_FN bool plain() const { return n_shards == 1; }
  ACTORLLM_KV_LAYOUT_FN bool owns(int64_t pos) const { return (pos / interleave) % n_shards == shard; }
  /// How many of the positions [0, end) this shard keeps: the local index of the first position at or after `end`
  /// that it keeps. The local index of an owned position p is local_count(p).
  ACTORLLM_KV_LAYOUT_FN int64_t local_count(int64_t end) const {
    if (n_shards == 1)
      return end;
    const int64_t cycle = static_cast<int64_t>(interleave) * n_shards;
    const int64_t in_cycle = end % cycle - static_cast<int64_t>(shard) * interleave;
    const int64_t partial = in_cycle < 0 ? 0 : (in_cycle > interleave ? interleave : in_cycle);
    return end / cycle * interleave + partial;
  }
};

}  // namespace actorllm

#undef ACTORLLM_KV_LAYOUT_FN
