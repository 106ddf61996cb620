// The knobs of continuous batching, named as vLLM's engine arguments name them.
#pragma once

#include "engine/engine_error.hpp"

#include <cstdint>
#include <optional>
#include <string_view>

namespace actorllm::engine {

/// Which waiting sequence is admitted first, and which running one is preempted first (the last in the same order).
enum class scheduling_policy {
  fcfs,      ///< arrival order
  priority,  ///< lower request priority value first, then arrival order
};

/// Lowercase name of a policy, as --scheduling-policy spells it.
constexpr std::string_view to_string(scheduling_policy policy) {
  return policy == scheduling_policy::fcfs ? "fcfs" : "priority";
}

/// Parses "fcfs" or "priority".
inline std::optional<scheduling_policy> parse_scheduling_policy(std::string_view name) {
  if (name == "fcfs")
    return scheduling_policy::fcfs;
  if (name == "priority")
    return scheduling_policy::priority;
  return std::nullopt;
}

/// Limits of one scheduler (one replica). n_blocks comes from profiling the workers (the minimum over all shards).
struct scheduler_config {
  int32_t max_num_seqs = 256;             ///< most sequences that hold KV blocks (running) at once
  int32_t max_num_batched_tokens = 2048;  ///< most tokens in one step; longer prompts are prefilled in chunks
  int32_t block_size = 16;                ///< token slots per KV-cache block
  int32_t n_blocks = 0;                   ///< KV-cache blocks of the replica
  int32_t max_model_len = 2048;           ///< most tokens (prompt + output) of a sequence
  scheduling_policy policy = scheduling_policy::fcfs;
  int32_t pp_size = 1;  ///< step plans kept in flight at once (one per pipeline stage keeps every stage busy)
  /// Reuse the computed KV blocks of prompt prefixes seen before (vLLM's --enable-prefix-caching, on by default).
  bool enable_prefix_caching = true;
  /// vLLM's --max-loras: the most LoRA adapters the running sequences may apply at once (a waiting request whose
  /// adapter would be one too many waits for one to leave); 0: LoRA off, and a request naming an adapter is refused.
  int32_t max_loras = 0;

  /// Empty when every field is usable; otherwise which one is not and why.
  std::optional<engine_error> validate() const;
};

}  // namespace actorllm::engine
