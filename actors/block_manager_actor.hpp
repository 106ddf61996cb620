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
  int32_t block_size = 16;
  uint64_t kv_cache_memory = 0;  ///< bytes each shard may use for its cache
  int32_t max_model_len = 0;     ///< the cache must hold at least one sequence of this length
  std::string device = "CPU";    ///< for the log line: "# CPU blocks: N"
};

/// What the cache sizing comes to, from the shards' profiles. Errors (invalid_config): a budget that holds no
/// block on some shard, or a capacity below max_model_len tokens (vLLM's check).
struct cache_plan {
  proto::kv_cache_config config;
  std::string error;  ///< empty when usable
};
cache_plan plan_cache(const std::vector<proto::shard_profile>& profiles, int32_t block_size, uint64_t kv_cache_memory,
                      int32_t max_model_len);

/// Spawns the block manager (event-based).
proto::block_manager_actor spawn_block_manager(caf::actor_system& sys, block_manager_args args);

}  // namespace actorllm::actors
