// The `cluster` executor: worker processes on the nodes of a cluster. The engine asks the head's registry for the
// nodes, places the ranks (a TP group inside a node, stages across nodes: actors/executors/placement.hpp), and has each
// node's agent start the workers, which register with the engine like mp's; the rest is the mp path.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actorllm/proto/cluster.hpp"
#include "actors/executors/placement.hpp"
#include "actors/executors/replica.hpp"
#include "actors/executors/worker_replica.hpp"

#include <caf/fwd.hpp>

#include <string>
#include <vector>

namespace actorllm::actors {

/// The cluster's token: config.cluster_token, else $ACTORLLM_CLUSTER_TOKEN, else "".
std::string cluster_token(const engine_config& config);

/// Connects to the head at `address` (HOST:PORT) and returns its nodes. Throws actorllm::error (invalid_config)
/// when the head cannot be reached within `timeout` or refuses the token.
std::vector<proto::cluster_node> cluster_nodes(caf::actor_system& sys, const std::string& address,
                                               const std::string& token, std::chrono::milliseconds timeout);

/// Builds replica `slot` on the cluster at config.cluster_address (the actor system must have the middleman
/// loaded). Its ranks go to devices that no running worker holds (as the agents report them now) and that no other
/// replica of this process is being placed on. Fails at once when the cluster cannot fit tp × pp, listing what was
/// asked and what each node has; a node without the model (or with another one) is named.
replica build_cluster_replica(caf::actor_system& sys, const engine_config& config, const replica_slot& slot = {});

/// The devices of a node that its agent's workers hold (node_info::workers).
std::vector<int32_t> devices_in_use(const proto::node_info& info);

/// A launcher that starts worker i on where.slots[i] through that node's agent (model_dir empty: no model check).
std::shared_ptr<worker_launcher> make_cluster_launcher(caf::actor_system& sys, std::vector<proto::cluster_node> nodes,
                                                       placement where, std::string model_dir, std::string model_hash);

/// NCCL_*, GLOO_* and ACTORLLM_* variables of this process that every worker gets (set once at the head).
std::vector<std::pair<std::string, std::string>> forwarded_environment();

}  // namespace actorllm::actors
