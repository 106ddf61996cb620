// The block manager: sizes the replica's paged KV cache from its shards' profiles (the minimum over the shards of
// the blocks that fit their memory budget), logs the capacity as vLLM does, and has every shard allocate its slice.
// The per-sequence block tables and reference counts live in the scheduler's block_allocator (as vLLM v1 keeps its
// KV cache manager inside the scheduler), so a step costs no extra round trip.
#pragma once

#include "actorllm/proto/interfaces.hpp"

#include <caf/fwd.hpp>

#include <cstdint>
#include <vector>

namespace actorllm::actors {

/// Everything the block manager is built from.
struct block_manager_args {
  std::vector<proto::shard_actor> shards;  ///< every shard of the replica, loaded
  int32_t block_size = 16;  ///< positions per block of the scheduler's tables (block_size × dcp_size of the flags)
  int32_t dcp_size = 1;     ///< decode context parallelism: the ranks that share each block's positions (the log)
  int32_t pcp_size = 1;     ///< prefill context parallelism: the copies of the TP group that share them too
  uint64_t kv_cache_memory = 0;  ///< bytes each shard may use for its cache
  int32_t max_model_len = 0;     ///< the cache must hold at least one sequence of this length
  std::string device = "CPU";    ///< for the log line: "# CPU blocks: N"
  /// GPU shards: tokens of the profile forward (max_num_batched_tokens) and the share of each GPU's memory the engine
  /// may use (vLLM's gpu_memory_utilization).
  int32_t profile_tokens = 0;
  double gpu_memory_utilization = 0.9;
};

/// What the cache sizing comes to, from the shards' profiles. Host shards: the blocks that fit kv_cache_memory, the
/// minimum over the shards. GPU shards (device_total > 0), vLLM's rule per GPU: total x gpu_memory_utilization, less
/// what others use on it (device_used - our shards' in_use) and our shards' non-KV peak, divided by the block bytes
/// of the shards on it; the minimum over the GPUs. Errors (invalid_config): no block fits on some shard or GPU, or a
/// capacity below max_model_len tokens (vLLM's check).
struct cache_plan {
  proto::kv_cache_config config;
  std::string error;  ///< empty when usable
};
cache_plan plan_cache(const std::vector<proto::shard_profile>& profiles, int32_t block_size, uint64_t kv_cache_memory,
                      int32_t max_model_len, double gpu_memory_utilization = 0.9);

/// Spawns the block manager (event-based).
proto::block_manager_actor spawn_block_manager(caf::actor_system& sys, block_manager_args args);

}  // namespace actorllm::actors
