// The `mp` executor: one worker process per shard on this node. The engine publishes a worker registry on a
// loopback (or ACTORLLM_HOST_IP) port, starts `actorllm worker` processes that register with it, and has each host
// one shard; from then on the replica is driven exactly as the in-process one (CAF proxies stand in for the remote
// shards), while hidden states and all-reduces cross processes over Gloo.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actors/executors/replica.hpp"

#include <caf/fwd.hpp>

#include <string>

namespace actorllm::actors {

/// The actorllm binary that worker processes run: $ACTORLLM_WORKER_BIN, else this executable when it is actorllm,
/// else `actorllm` beside it. Throws actorllm::error (invalid_config) when none exists.
std::string worker_binary();

/// The address this node's data plane binds and advertises: $ACTORLLM_HOST_IP, else 127.0.0.1.
std::string data_plane_host();

/// Builds a replica whose shards live in worker processes of this node (the actor system must have the middleman
/// loaded), for replica `slot`: its workers take the GPUs of its share (replica_share) and its part of the threads.
/// Throws actorllm::error naming the worker or shard that failed; every process started is stopped again.
replica build_mp_replica(caf::actor_system& sys, const engine_config& config, const replica_slot& slot = {});

}  // namespace actorllm::actors
