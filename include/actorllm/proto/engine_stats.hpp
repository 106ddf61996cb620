// Serialization of engine_stats, the answer to a stats query (the scheduler fills the counters, the engine its
// request count).
#pragma once

#include "actorllm/engine_stats.hpp"

#include <caf/meta/type_name.hpp>

namespace actorllm {

/// CAF inspection of eplb_report.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eplb_report& x) {
  return f(caf::meta::type_name("eplb_report"), x.rearrangements, x.last_stall_seconds, x.tokens_per_rank_mean_before,
           x.tokens_per_rank_max_before, x.tokens_per_rank_mean_after, x.tokens_per_rank_max_after);
}

/// CAF inspection of engine_stats.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_stats& x) {
  return f(caf::meta::type_name("engine_stats"), x.healthy, x.failure, x.n_requests, x.n_running, x.n_waiting,
           x.n_preemptions, x.n_steps, x.n_steps_in_flight, x.n_blocks, x.n_free_blocks, x.block_size, x.kv_cache_usage,
           x.prefix_cache_queries, x.prefix_cache_hits, x.n_cached_blocks, x.forward_seconds, x.sample_seconds,
           x.expert_tokens, x.eplb);
}

}  // namespace actorllm
