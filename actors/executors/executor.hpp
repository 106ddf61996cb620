// One entry point for building a replica with whichever executor runs it (uni, mp or cluster), after the
// choice of actors/executors/executor_choice.hpp has been made from the config and this node's devices.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actors/executors/replica.hpp"

#include <caf/fwd.hpp>

#include <string>

namespace actorllm::actors {

/// This node's CPU devices for the executor rule: $ACTORLLM_CPU_DEVICES, else 1 (the cores are one device that
/// the shards of one process share as threads).
int32_t local_cpu_devices();

/// The backend that runs `config` ("uni", "mp" or "cluster"), logged with the reason. Left to choose, it picks uni
/// for expert parallelism over the data-parallel replicas of an MoE model, whose replicas step in lockstep in one
/// process (actors/executors/lockstep_replicas.hpp). Throws actorllm::error
/// (invalid_config) for an unknown or impossible --distributed-executor-backend, naming the numbers.
std::string resolve_executor(const engine_config& config);

/// The replicas whose shards run on this node's devices (executor rule and device check): data_parallel_size_local
/// when given, else data_parallel_size.
int32_t local_replica_count(const engine_config& config);

/// Whether replica `slot` runs on the cluster's nodes while the engine's own executor is local (uni or mp): with one
/// endpoint for all replicas (no data_parallel_rank), data_parallel_size_local M < data_parallel_size N keeps
/// replicas 0..M-1 on this node and puts M..N-1 on the cluster, as vLLM's replicas on other nodes.
bool runs_on_cluster(const engine_config& config, const replica_slot& slot);

/// Whether any replica of `config` (after resolve_executor) runs on a cluster: the cluster executor, or replicas
/// beyond data_parallel_size_local (runs_on_cluster).
bool uses_cluster(const engine_config& config);

/// Builds the replica with config.distributed_executor_backend (as resolve_executor returned it), or the cluster's
/// when runs_on_cluster, for `slot` (replica_slot is declared in replica.hpp): uni and mp give it its own share
/// of this node's devices and threads (replica_share), cluster places its ranks on devices no other live replica
/// uses.
replica build_replica(caf::actor_system& sys, const engine_config& config, const replica_slot& slot = {});

}  // namespace actorllm::actors
