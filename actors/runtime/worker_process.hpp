// What `actorllm worker` runs: an actor system with CAF's network layer, the worker root actor registered with the
// engine's registry, and a wait for the engine to go away (then the process ends: a worker outlives no engine).
#pragma once

#include "actors/cluster/control_network.hpp"

#include <cstdint>
#include <string>

namespace actorllm::actors {

struct worker_options {
  std::string registry_host;
  uint16_t registry_port = 0;
  int32_t index = 0;
  std::string token;        ///< from ACTORLLM_WORKER_TOKEN
  control_tls tls;          ///< from ACTORLLM_TLS_*: the engine's transport
  std::string control_key;  ///< from ACTORLLM_CONTROL_KEY: what the engine's control gate asks for
};

/// Connects to the registry, registers, hosts shards until the engine is gone. Returns the exit status: 0 when the
/// engine went away, 1 when it could not connect or was refused (the reason is logged).
int run_worker(const worker_options& options);

}  // namespace actorllm::actors
