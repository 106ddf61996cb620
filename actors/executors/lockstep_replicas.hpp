// Expert parallelism over data-parallel replicas, as vLLM runs it: the EP group spans every replica's TP ranks
// (dp × tp), each rank holding n_expert / (dp × tp) whole experts, and every MoE layer of every step exchanges
// tokens over that whole group. So the replicas step in lockstep: a replica with nothing of its own to run sends
// its shards idle plans (vLLM's dummy batch), in which they only serve their experts to the other replicas' tokens.
// Its scheduler learns how far its peers stepped from their messages (engine::lockstep_rounds); the schedulers live
// in the engine's process whatever the executor, so the rounds are CAF messages between them.
//
// A set of such replicas is built together (their shards meet in the EP group from the first profile forward on),
// fails together and restarts together (api/replica_set). The EP group's data plane follows the executor:
//   - uni: one process, an abortable shared-memory group (a failure aborts it, so no shard stays blocked);
//   - mp and cluster: the replicas' shards are in worker processes (on one node, or on a cluster's nodes); they meet
//     through an expert store in the engine and build the group with the transports of a TP group (NCCL between GPUs
//     of their own, shared memory within a host, else Gloo). A failure stops every worker of the set at once, which
//     ends the steps blocked in the group with their processes.
#pragma once
#pragma once

#include "actorllm/engine_config.hpp"
#include "actors/executors/replica.hpp"
#include "comm/shared_memory_collective.hpp"
#include "model/model_config.hpp"

#include <caf/fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace actorllm::actors {

/// Whether the replicas of `config` (its executor resolved) step in lockstep for `model`: expert parallelism for an
/// MoE model with more than one replica behind this engine. Throws actorllm::error (invalid_config) naming the
/// settings when they ask for that where it cannot run: one replica per engine (data_parallel_rank), replicas on
/// other nodes unless their workers are the mp or cluster executor's, more than one pipeline stage, or more EP ranks
/// than experts.
bool steps_in_lockstep(const engine_config& config, const model::model_config& model);

/// As above, reading the model's config.json; false when it cannot be read (building the replica then reports why).
bool steps_in_lockstep(const engine_config& config);

/// Whether the model directory's config.json names an MoE model; false when it cannot be read.
bool names_moe_model(const std::string& dir);

/// The replicas of one lockstep set and what their EP group meets in.
struct lockstep_set {
  std::vector<replica> replicas;  ///< data-parallel ranks 0..dp_size-1, in order
  /// uni: the EP group itself.
  std::shared_ptr<comm::shared_memory_group> expert_group;
  /// mp and cluster: the store the shards of every replica build their EP group through (stopped with the set).
  proto::worker_registry_actor expert_store;
};

/// Builds the dp_size replicas of `config` at once, over one EP group of dp_size × tp ranks, and tells each
/// scheduler of its peers. When one cannot be built the group is aborted (the others may wait in it), every replica
/// built is stopped, and the first failure is thrown.
lockstep_set build_lockstep_replicas(caf::actor_system& sys, const engine_config& config, int32_t dp_size);

/// Stops the replicas of a lockstep set. Serving (`failed` false): drains them all at once (an idle replica keeps
/// serving its experts until no step of its peers is in flight). After a failure, no drain: a step of the set may
/// wait in the EP group for a rank that is gone, so the group is aborted (uni) or every worker stopped (mp, cluster)
/// first. Then stops their actors and the set's store. Empty replicas (already stopped) are skipped.
void stop_lockstep_set(caf::actor_system& sys, lockstep_set& set, const std::string& why, bool failed);

}  // namespace actorllm::actors
