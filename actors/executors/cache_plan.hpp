// The paged KV cache's size for a replica, from its shards' profiles (the minimum over the shards of the blocks that
// fit their memory budget), and the capacity log vLLM users know ("# GPU blocks: N"). The per-sequence block tables
// and reference counts live in the scheduler's block_allocator (as vLLM v1 keeps its KV cache manager inside the
// scheduler), so a step costs no extra round trip; finish_replica asks the shards for their profiles, plans the
// cache here and has every shard allocate its slice.
#pragma once

#include "actorllm/proto/kv_cache_config.hpp"
#include "actorllm/proto/worker.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::actors {

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

/// The facts of the capacity log beside the plan.
struct cache_log_facts {
  std::string device = "CPU";  ///< "# CPU blocks: N" or "# GPU blocks: N"
  int32_t dcp_size = 1;        ///< decode context parallelism: the ranks that share each block's positions
  int32_t pcp_size = 1;        ///< prefill context parallelism: the copies of the TP group that share them too
  int32_t max_model_len = 0;   ///< for the concurrency line
  std::string kv_cache_dtype = "float32";  ///< the cache's element type (vLLM's name), which sets its bytes per token
};

/// The capacity lines as vLLM logs them: "# GPU blocks: N", the KV cache size in tokens (and its element type), the
/// context-parallel share of each rank, the maximum concurrency at max_model_len.
std::vector<std::string> cache_plan_lines(const proto::kv_cache_config& c, const cache_log_facts& facts);
/// Logs cache_plan_lines.
void log_cache_plan(const proto::kv_cache_config& c, const cache_log_facts& facts);

}  // namespace actorllm::actors
