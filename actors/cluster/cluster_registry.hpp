// The head's cluster registry (`actorllm node --head`, DESIGN.md §5): node agents join it with the cluster token,
// engines and `actorllm status` ask it for the nodes. It watches every agent two ways: CAF monitoring (a lost
// connection or a dead agent removes the node at once) and an application-level heartbeat (an agent that stops
// answering for a few seconds stays listed but is marked unhealthy).
#pragma once

#include "actorllm/proto/cluster.hpp"

#include <caf/fwd.hpp>

#include <chrono>
#include <string>

namespace actorllm::actors {

/// How the registry watches its agents.
struct cluster_registry_timing {
  std::chrono::milliseconds heartbeat_interval{1000};  ///< how often every agent is asked for its node_info
  std::chrono::milliseconds heartbeat_timeout{2000};   ///< how long one answer may take
  std::chrono::milliseconds unhealthy_after{5000};     ///< silence after which a node is marked unhealthy
};

/// Spawns the registry (event-based). Nodes and clients must present `token`.
proto::cluster_registry_actor spawn_cluster_registry(caf::actor_system& sys, std::string token,
                                                     cluster_registry_timing timing = {});

}  // namespace actorllm::actors
