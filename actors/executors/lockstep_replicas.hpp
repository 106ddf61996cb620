// Expert parallelism over data-parallel replicas, as vLLM runs it: the EP group spans every replica's TP ranks
// (dp × tp), each rank holding n_expert / (dp × tp) whole experts, and every MoE layer of every step exchanges
// tokens over that whole group. So the replicas step in lockstep: a replica with nothing of its own to run sends
// its shards idle plans (vLLM's dummy batch), in which they only serve their experts to the other replicas' tokens.
// Its scheduler learns how far its peers stepped from their messages (engine::lockstep_rounds).
//
// A set of such replicas is built together (their shards meet in the EP group from the first GPU profile forward
// on), fails together (the group is aborted, so no shard stays blocked waiting for a lost peer) and restarts
// together (api/replica_set). It runs in one process: the uni executor, one pipeline stage; the EP group is an
// abortable shared-memory group.
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
/// settings when they ask for that where it cannot run: replicas in other processes or on other nodes (the mp and
/// cluster executors, data_parallel_rank, data_parallel_size_local below data_parallel_size), more than one
/// pipeline stage, or more EP ranks than experts.
bool steps_in_lockstep(const engine_config& config, const model::model_config& model);

/// As above, reading the model's config.json; false when it cannot be read (building the replica then reports why).
bool steps_in_lockstep(const engine_config& config);

/// Whether the model directory's config.json names an MoE model; false when it cannot be read.
bool names_moe_model(const std::string& dir);

/// The replicas of one lockstep set and the EP group they share.
struct lockstep_set {
  std::vector<replica> replicas;  ///< data-parallel ranks 0..dp_size-1, in order
  std::shared_ptr<comm::shared_memory_group> expert_group;
};

/// Builds the dp_size replicas of `config` at once (uni executor), over one EP group of dp_size × tp ranks, and
/// tells each scheduler of its peers. When one cannot be built the group is aborted (the others may wait in it),
/// every replica built is stopped, and the first failure is thrown.
lockstep_set build_lockstep_replicas(caf::actor_system& sys, const engine_config& config, int32_t dp_size);

/// Stops the replicas of a lockstep set: drains them all at once (an idle replica keeps serving its experts until
/// no step of its peers is in flight), stops their actors, then aborts the group with `why`, so that no shard of a
/// replica that failed stays blocked in it. Empty replicas (already stopped) are skipped.
void stop_lockstep_replicas(caf::actor_system& sys, std::vector<replica>& replicas,
                            const std::shared_ptr<comm::shared_memory_group>& expert_group, const std::string& why);

}  // namespace actorllm::actors
