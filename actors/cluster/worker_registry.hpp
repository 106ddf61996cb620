// The engine's worker registry (executors mp and cluster): the actor that worker processes find first. It admits
// workers that bring this generation's token, tells the executor about each one, and serves as the key/value store
// through which the shards' data plane (Gloo) meets. A restart builds a new registry with a new token, so a
// worker of a failed generation can never join the next one.
#pragma once

#include "actorllm/proto/worker.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <string>

namespace actorllm::actors {

/// Everything the registry is built from.
struct worker_registry_args {
  std::string token;      ///< workers must present it
  int32_t n_workers = 0;  ///< valid indices are [0, n_workers)
  caf::actor listener;    ///< receives every admitted proto::worker_hello
};

/// Spawns the registry (event-based).
proto::worker_registry_actor spawn_worker_registry(caf::actor_system& sys, worker_registry_args args);

}  // namespace actorllm::actors
