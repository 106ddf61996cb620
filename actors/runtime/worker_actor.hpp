// A worker process's root actor (executors mp and cluster): it registers with the engine's worker registry, hosts
// the shards the engine assigns it (each a detached shard actor whose collectives run over Gloo, meeting through
// the registry's store), and answers liveness probes.
#pragma once

#include "actorllm/proto/worker.hpp"

#include <caf/fwd.hpp>

#include <string>

namespace actorllm::actors {

/// Spawns the worker root actor in this (worker) process. `registry` is the engine's (a remote handle).
proto::worker_actor spawn_worker(caf::actor_system& sys, proto::worker_registry_actor registry, int32_t index);

/// shard_args for an assignment in a worker process (shard_args_of), with builders of the shard's collective and
/// stage links (NCCL, shared memory or Gloo), `registry` being their
/// rendezvous store. Exposed for tests that host "remote" shards in one process. Throws actorllm::error
/// (invalid_config) for a device this build cannot run.
struct shard_args;
shard_args make_worker_shard_args(caf::actor_system& sys, const proto::shard_assignment& a,
                                  proto::worker_registry_actor registry);

}  // namespace actorllm::actors
