// What `actorllm worker` runs: an actor system with CAF's network layer, the worker root actor registered with the
// engine's registry, and a wait for the engine to go away (then the process ends: a worker outlives no engine).
#pragma once

#include <caf/fwd.hpp>

#include <cstdint>
#include <string>

namespace actorllm::actors {

/// Loads CAF's middleman into `cfg` with BASP heartbeats and a connection timeout switched on (they are off by
/// default in CAF 0.17), so a peer that stops answering is dropped within seconds. For engines and workers alike.
/// `direct_connections`: let peers met through a third node connect directly (workers only).
void enable_network(caf::actor_system_config& cfg, bool direct_connections = false);

struct worker_options {
  std::string registry_host;
  uint16_t registry_port = 0;
  int32_t index = 0;
  std::string token;  ///< from ACTORLLM_WORKER_TOKEN
};

/// Connects to the registry, registers, hosts shards until the engine is gone. Returns the exit status: 0 when the
/// engine went away, 1 when it could not connect or was refused (the reason is logged).
int run_worker(const worker_options& options);

}  // namespace actorllm::actors
