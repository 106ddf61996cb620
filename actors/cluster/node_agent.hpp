// A node agent (`actorllm node`, DESIGN.md §5): reports what its node has and starts, watches and stops the
// `actorllm worker` processes that engines ask for. Before starting a worker it checks that this node holds the
// engine's model (same content hash), so a wrong or missing checkpoint fails at once with the node's name.
#pragma once

#include "actorllm/proto/cluster.hpp"

#include <caf/fwd.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actorllm::actors {

/// What an agent is built from.
struct node_agent_config {
  proto::node_info info;  ///< node_id, host, device_kind, n_devices, cores_per_device, memory; the rest is filled in
  std::string worker_program;                    ///< the actorllm binary the workers run (actors::worker_binary())
  std::chrono::milliseconds reap_interval{200};  ///< how often ended workers are collected
  /// Set in every worker's environment after the engine's forwarded variables: this node's own settings (its
  /// control-plane TLS files, control_tls::environment()).
  std::vector<std::pair<std::string, std::string>> worker_env;
};

/// This machine's memory from /proc/meminfo (MemTotal, MemAvailable); zeros when it cannot be read.
struct memory_info {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
};
memory_info read_memory_info();

/// Spawns the agent (event-based). Its workers are killed when it ends.
proto::node_agent_actor spawn_node_agent(caf::actor_system& sys, node_agent_config config);

}  // namespace actorllm::actors
