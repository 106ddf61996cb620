// Sizing the paged KV cache: what each shard reports about itself, and the cache every shard then allocates (the
// same block count everywhere, the minimum over the shards of what fits their memory budget).
#pragma once

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>

namespace actorllm::proto {

/// One shard's answer to a profile query.
struct shard_profile {
  int32_t stage = 0;
  int32_t tp_rank = 0;
  int64_t layer_begin = 0;
  int64_t layer_end = 0;
  uint64_t weight_bytes = 0;     ///< bytes of the weight slice it holds
  uint64_t bytes_per_block = 0;  ///< bytes one KV block takes on this shard (its layers, its kv heads)
  int64_t n_blocks_fit = 0;      ///< blocks that fit in the memory budget it was given (host backends)
  std::string kv_cache_dtype;    ///< the element type its cache stores (vLLM's name: "bfloat16", ...)
  // A GPU shard's memory after its profile forward (zeros on the CPU, whose cache the budget above sizes):
  std::string device;         ///< "HOST/cuda:N": shards with equal strings share one GPU's memory
  uint64_t device_total = 0;  ///< the GPU's memory
  uint64_t device_used = 0;   ///< in use on the GPU by anyone (total - free), sampled after the profile
  uint64_t in_use = 0;        ///< held by this shard after the profile (weights, scratch)
  uint64_t peak_in_use = 0;   ///< the most this shard held during the profile forward (its non-KV peak)

  friend bool operator==(const shard_profile&, const shard_profile&) = default;
};

/// CAF inspection of shard_profile.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_profile& x) {
  return f(caf::meta::type_name("shard_profile"), x.stage, x.tp_rank, x.layer_begin, x.layer_end, x.weight_bytes,
           x.bytes_per_block, x.n_blocks_fit, x.kv_cache_dtype, x.device, x.device_total, x.device_used, x.in_use,
           x.peak_in_use);
}

/// The replica's KV cache.
struct kv_cache_config {
  int32_t n_blocks = 0;
  int32_t block_size = 0;
  uint64_t max_bytes_per_block = 0;  ///< the largest per-block size over the shards (the one that bounds n_blocks)

  int64_t token_capacity() const { return int64_t{n_blocks} * block_size; }
  friend bool operator==(const kv_cache_config&, const kv_cache_config&) = default;
};

/// CAF inspection of kv_cache_config.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_cache_config& x) {
  return f(caf::meta::type_name("kv_cache_config"), x.n_blocks, x.block_size, x.max_bytes_per_block);
}

}  // namespace actorllm::proto
