// The atoms that name the protocol's verbs where a message has no type of its own (CAF 0.17 atom constants).
#pragma once

#include <caf/atom.hpp>

namespace actorllm::proto {

/// shard: load the weight slice.
using load_atom = caf::atom_constant<caf::atom("load")>;
/// shard: report the per-block cache size and what fits in the memory budget.
using profile_atom = caf::atom_constant<caf::atom("profile")>;
/// shard: allocate the KV cache.
using init_cache_atom = caf::atom_constant<caf::atom("init_cache")>;
/// block manager: profile the shards, size the cache and allocate it everywhere.
/// wire an actor to the one it reports to.
using connect_atom = caf::atom_constant<caf::atom("connect")>;
/// abort a request.
using abort_atom = caf::atom_constant<caf::atom("abort")>;
/// ask for engine_stats.
using stats_atom = caf::atom_constant<caf::atom("stats")>;
/// stop taking work, abort what runs, reply once the pipeline is empty.
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;
/// the scheduler's own timer: fail the replica when a step has been in flight longer than the step timeout.
using step_watch_atom = caf::atom_constant<caf::atom("step_watch")>;
/// lockstep expert parallelism: a peer replica's scheduler dispatched another step (scheduler to scheduler).
using lockstep_round_atom = caf::atom_constant<caf::atom("lsround")>;
/// forget every cached KV block (POST /reset_prefix_cache).
using reset_prefix_cache_atom = caf::atom_constant<caf::atom("resetcache")>;

}  // namespace actorllm::proto
