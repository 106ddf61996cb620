// The typed interfaces of the long-lived roles of one replica: engine, scheduler, block manager, shard.
//
//   submitter --submit_request--> engine --request_spec--> scheduler --shared_plan--> every shard (all stages)
//   stage s rank r --stage_handoff(hidden)--> stage s+1 rank r ... last stage rank 0 (samples) --step_result-->
//   scheduler --step_update--> engine --output_batch--> submitter
#pragma once

#include "actorllm/engine_stats.hpp"
#include "actorllm/proto/atoms.hpp"
#include "actorllm/proto/engine_stats.hpp"
#include "actorllm/proto/finish_sequences.hpp"
#include "actorllm/proto/kv_cache_config.hpp"
#include "actorllm/proto/request_spec.hpp"
#include "actorllm/proto/sinks.hpp"
#include "actorllm/proto/submit_request.hpp"

#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>

namespace actorllm::proto {

/// The engine: owns requests (tokenize, stop strings, detokenize) and streams their news to the submitters.
using engine_actor = caf::typed_actor<
    /// Starts a request; news (or the rejection) goes to its sink.
    caf::reacts_to<submit_request>,
    /// Aborts a request; replies once its KV blocks are free (false: not live).
    caf::replies_to<abort_atom, uint64_t>::with<bool>,
    /// One step's news from the scheduler.
    caf::reacts_to<step_update>,
    /// A stats snapshot, consistent with every message the engine processed before.
    caf::replies_to<caf::get_atom, stats_atom>::with<engine_stats>,
    /// Forgets every cached KV block; replies with how many were cached.
    caf::replies_to<reset_prefix_cache_atom>::with<int32_t>,
    /// Aborts everything and replies once the pipeline is empty; the replica then takes no more requests.
    caf::replies_to<shutdown_atom>::with<caf::ok_atom>>;

/// The scheduler: continuous batching over the replica's KV blocks, keeping up to pp_size plans in flight.
using scheduler_actor = caf::typed_actor<
    /// Queues a tokenized request (errors: too long, cannot fit the cache, duplicate, unhealthy replica).
    caf::replies_to<request_spec>::with<caf::ok_atom>,
    /// Finishes a request at once, freeing its blocks; false when it was not live.
    caf::replies_to<abort_atom, uint64_t>::with<bool>,
    /// Finishes sequences that hit a stop string.
    caf::reacts_to<finish_sequences>,
    /// A step's sampled tokens (from the sampler shard).
    caf::reacts_to<step_result>,
    /// Where step updates go (the engine).
    caf::reacts_to<connect_atom, update_sink>,
    /// Lockstep expert parallelism: a peer replica's scheduler has dispatched `round` steps; this one dispatches
    /// idle plans until it has as many, whenever it has no step of its own in flight.
    caf::reacts_to<lockstep_round_atom, uint64_t>,
    /// Lockstep expert parallelism: a peer (another replica's scheduler) to tell of every step dispatched here.
    caf::replies_to<connect_atom, round_sink>::with<caf::ok_atom>,
    /// Queue lengths, KV-cache use and counters.
    caf::replies_to<caf::get_atom, stats_atom>::with<engine_stats>,
    /// Forgets every cached KV block; replies with how many were cached.
    caf::replies_to<reset_prefix_cache_atom>::with<int32_t>,
    /// Aborts everything, stops scheduling, replies once no plan is in flight.
    caf::replies_to<shutdown_atom>::with<caf::ok_atom>,
    /// (from itself) checks the age of the oldest step in flight against the step timeout.
    caf::reacts_to<step_watch_atom>>;

/// A shard: one tp rank of one pipeline stage, with its weight slice, KV-cache slice and kernel threads.
using shard_actor = caf::typed_actor<
    /// A step's plan (from the scheduler, to every shard): update the block tables, run the layers once the previous
    /// stage's output is in, pass hidden states on (or sample, on the sampler shard).
    caf::reacts_to<shared_plan>,
    /// The previous stage's output for a step.
    caf::reacts_to<stage_handoff>,
    /// Load the weight slice (already sliced while reading).
    caf::replies_to<load_atom>::with<caf::ok_atom>,
    /// Report the per-block size for a block size and how many blocks fit a byte budget; a GPU shard first runs a
    /// profile forward of that many tokens (the last int; 0: none) and reports its memory.
    caf::replies_to<profile_atom, int32_t, uint64_t, int32_t>::with<shard_profile>,
    /// Allocate the KV cache.
    caf::replies_to<init_cache_atom, kv_cache_config>::with<caf::ok_atom>,
    /// Where sampled tokens and step failures go (the scheduler).
    caf::replies_to<connect_atom, result_sink>::with<caf::ok_atom>>;

}  // namespace actorllm::proto
