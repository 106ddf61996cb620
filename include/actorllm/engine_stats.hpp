// A snapshot of one engine replica: health, queue lengths, KV-cache use and counters (the numbers /metrics and
// tests read).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm {

/// Engine state at one instant.
struct engine_stats {
  bool healthy = true;             ///< false once a shard failed
  std::string failure;             ///< what failed, when not healthy
  uint64_t n_requests = 0;         ///< requests the engine holds (not finished)
  uint64_t n_running = 0;          ///< sequences holding KV blocks
  uint64_t n_waiting = 0;          ///< sequences waiting for admission (new or preempted)
  uint64_t n_preemptions = 0;      ///< preemptions by recompute since start
  uint64_t n_steps = 0;            ///< forward steps completed since start
  uint64_t n_steps_in_flight = 0;  ///< step plans in the pipeline now
  int32_t n_blocks = 0;            ///< KV-cache blocks of the replica
  int32_t n_free_blocks = 0;       ///< blocks no sequence holds
  int32_t block_size = 0;          ///< token slots per block
  double kv_cache_usage = 0.0;     ///< fraction of blocks in use
  /// Prefix caching, counted in tokens as vLLM counts them: prompt tokens new requests looked up in the cache, and
  /// how many of those it held (hit rate = hits / queries). Both 0 with caching off.
  uint64_t prefix_cache_queries = 0;
  uint64_t prefix_cache_hits = 0;
  int32_t n_cached_blocks = 0;  ///< blocks registered in the prefix cache (held or free)
  /// Time accounting since start, summed over steps (the engine-overhead benchmark reads these): the last stage's
  /// forward passes and sampling as its sampler shard measured them.
  double forward_seconds = 0.0;
  double sample_seconds = 0.0;
  /// MoE models: tokens routed to each expert since start (index: expert id), summed over every MoE layer; each
  /// token counts once per expert of its top-k. Empty otherwise.
  std::vector<uint64_t> expert_tokens;

  friend bool operator==(const engine_stats&, const engine_stats&) = default;
};

}  // namespace actorllm
