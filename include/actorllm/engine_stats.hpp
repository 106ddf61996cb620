// A snapshot of one engine replica: health, queue lengths, KV-cache use and counters (the numbers /metrics and
// tests read).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm {

/// One data-parallel replica at one instant (as the LLM facade sees it).
struct replica_stats {
  int32_t rank = 0;                ///< its data-parallel rank
  bool healthy = true;             ///< serving (false: failed, being restarted, or given up on)
  std::string failure;             ///< why not, when not healthy
  int32_t restarts = 0;            ///< restarts since start
  uint64_t n_requests = 0;         ///< live requests routed to it
  uint64_t n_running = 0;          ///< its sequences holding KV blocks
  uint64_t n_waiting = 0;          ///< its sequences waiting for admission
  double kv_cache_usage = 0.0;     ///< fraction of its KV blocks in use
  uint64_t routed_requests = 0;    ///< requests the router sent it since start (failovers included)
  int64_t outstanding_tokens = 0;  ///< the work the router counts for it (prompt and output tokens still to go)
  /// Its engine's totals since it was (re)built (a restart starts them from 0 again).
  uint64_t n_preemptions = 0;
  uint64_t prefix_cache_queries = 0;
  uint64_t prefix_cache_hits = 0;

  friend bool operator==(const replica_stats&, const replica_stats&) = default;
};

/// Expert-parallel load balancing (--enable-eplb) at its last rearrangement: tokens per rank of the expert-parallel
/// group, each MoE layer's mean and max over the ranks summed over the layers (max / mean is the imbalance, 1 at
/// best). before: what the ranks served since the previous rearrangement; after: the same window of load as the new
/// placement serves it. All zero until the first rearrangement.
struct eplb_report {
  uint64_t rearrangements = 0;      ///< since start
  double last_stall_seconds = 0.0;  ///< how long the last one held the steps up
  double tokens_per_rank_mean_before = 0.0;
  double tokens_per_rank_max_before = 0.0;
  double tokens_per_rank_mean_after = 0.0;
  double tokens_per_rank_max_after = 0.0;

  friend bool operator==(const eplb_report&, const eplb_report&) = default;
};

/// Engine state at one instant. With data-parallel replicas the counts are summed over the replicas that serve,
/// block counts are per replica, and `replicas` has one entry each.
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
  /// Expert-parallel load balancing (--enable-eplb; zeros otherwise). With lockstep replicas: their one EP group's.
  eplb_report eplb;
  /// Expert parallelism: bytes the MoE exchanges (tokens to their experts and back, EPLB's weight moves) moved for the
  /// sampling rank of each replica's last stage since start, sent plus received, summed over the replicas; 0 otherwise.
  uint64_t ep_exchange_bytes = 0;
  /// Per replica (the LLM facade fills it; empty from a single engine).
  std::vector<replica_stats> replicas;
  uint64_t n_failovers = 0;  ///< requests moved to another replica after theirs failed, since start

  friend bool operator==(const engine_stats&, const engine_stats&) = default;
};

}  // namespace actorllm
