// The `uni` executor: builds one replica's whole actor graph in this process (every shard a detached actor with
// its own threads, TP ranks of a stage sharing memory) and tears it down again.
#pragma once

#include "actors/executors/replica.hpp"

#include <caf/fwd.hpp>

namespace actorllm::actors {

/// Checks `config` against the model's config.json (TP split of the heads, pipeline layout, scheduler limits)
/// before any weight is read, then spawns the shards, loads them in parallel, sizes the KV cache through the block
/// manager, and spawns the scheduler and the engine. Throws actorllm::error (invalid_config, load_failed) naming
/// the problem; actors spawned before a failure are stopped again.
/// Replica `slot`'s shards use its share: GPUs from share.device_offset on, share.threads kernel threads.
replica build_uni_replica(caf::actor_system& sys, const engine_config& config, const replica_slot& slot = {});

}  // namespace actorllm::actors
