// The messages of a cluster (executor `cluster`): node agents join the head's cluster registry with the shared
// token; engines (and `actorllm status` / `actorllm check`) ask the registry for the nodes and ask agents to start
// worker processes that register with the engine's own worker registry (proto/worker.hpp).
#pragma once

#include "actorllm/proto/atoms.hpp"

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::proto {

using join_atom = caf::atom_constant<caf::atom("join")>;
using nodes_atom = caf::atom_constant<caf::atom("nodes")>;
using start_worker_atom = caf::atom_constant<caf::atom("start_wrk")>;
using stop_workers_atom = caf::atom_constant<caf::atom("stop_wrks")>;
using model_hash_atom = caf::atom_constant<caf::atom("model_hash")>;

/// A worker process an agent runs: which engine replica and rank it serves, on which of the node's devices.
struct worker_report {
  int32_t index = 0;    ///< its index in the replica's world (stage-major)
  int32_t dp_rank = 0;  ///< the engine's data-parallel replica
  int32_t stage = 0;
  int32_t tp_rank = 0;
  int32_t device = 0;  ///< which of the node's devices it holds
  int32_t pid = 0;

  friend bool operator==(const worker_report&, const worker_report&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_report& x) {
  return f(caf::meta::type_name("worker_report"), x.index, x.dp_rank, x.stage, x.tp_rank, x.device, x.pid);
}

/// What a node is and has, as its agent reports it.
struct node_info {
  std::string node_id;      ///< unique in the cluster (--node-id, default host name + port)
  std::string host;         ///< the address its processes bind and advertise (ACTORLLM_HOST_IP)
  std::string device_kind;  ///< "cpu" or "cuda"
  int32_t n_devices = 0;    ///< GPUs, or --cpu-devices slices of this machine's cores
  int32_t cores_per_device = 0;
  uint64_t total_memory_bytes = 0;
  uint64_t free_memory_bytes = 0;
  int32_t n_workers = 0;  ///< worker processes the agent runs now
  int32_t agent_pid = 0;
  /// The workers it runs now (n_workers of them): the devices they hold are taken for placement, and `actorllm
  /// status` shows which replica, stage and rank each serves.
  std::vector<worker_report> workers;

  friend bool operator==(const node_info&, const node_info&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_info& x) {
  return f(caf::meta::type_name("node_info"), x.node_id, x.host, x.device_kind, x.n_devices, x.cores_per_device,
           x.total_memory_bytes, x.free_memory_bytes, x.n_workers, x.agent_pid, x.workers);
}

/// A worker process an agent starts for an engine. The agent checks the model first: a node that lacks
/// model_dir, or holds different content (hash), refuses, naming itself.
struct worker_launch {
  std::string registry_host;  ///< the engine's worker registry
  uint16_t registry_port = 0;
  int32_t index = 0;    ///< the worker's index in the engine's world (stage-major shard order)
  std::string token;    ///< the engine's worker token (ACTORLLM_WORKER_TOKEN of the worker)
  int32_t device = 0;   ///< which of the node's devices (CPU: which core slice)
  int32_t dp_rank = 0;  ///< the engine's data-parallel replica the worker serves (reported back, names the process)
  int32_t stage = 0;    ///< the pipeline stage and TP rank it will host (reported back for `actorllm status`)
  int32_t tp_rank = 0;
  std::string model_dir;
  std::string model_hash;              ///< model_content_hash() on the engine's node
  std::vector<std::string> env_names;  ///< environment for the worker (NCCL_*, GLOO_*, ACTORLLM_* of the head)
  std::vector<std::string> env_values;

  friend bool operator==(const worker_launch&, const worker_launch&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_launch& x) {
  return f(caf::meta::type_name("worker_launch"), x.registry_host, x.registry_port, x.index, x.token, x.device,
           x.dp_rank, x.stage, x.tp_rank, x.model_dir, x.model_hash, x.env_names, x.env_values);
}

/// A node agent (`actorllm node --join`): reports its node and starts, watches and stops worker processes.
using node_agent_actor = caf::typed_actor<
    /// The node's current state.
    caf::replies_to<caf::get_atom, nodes_atom>::with<node_info>,
    /// Starts a worker; replies with its pid. Errors name the node (missing or different model, no such device).
    caf::replies_to<start_worker_atom, worker_launch>::with<int32_t>,
    /// Stops (SIGKILL) every worker started with this engine token; replies with how many.
    caf::replies_to<stop_workers_atom, std::string>::with<int32_t>,
    /// model_content_hash of a directory on this node ("" when it has no such model).
    caf::replies_to<model_hash_atom, std::string>::with<std::string>>;

/// A node as the registry knows it.
struct cluster_node {
  node_info info;
  node_agent_actor agent;
  bool healthy = true;           ///< its agent answered the last heartbeat
  double last_seen_seconds = 0;  ///< since the last answer

  friend bool operator==(const cluster_node&, const cluster_node&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_node& x) {
  return f(caf::meta::type_name("cluster_node"), x.info, x.agent, x.healthy, x.last_seen_seconds);
}

/// How an agent (or a client) introduces itself to the registry. The token is checked before anything else.
struct node_join {
  std::string token;
  node_info info;
  node_agent_actor agent;

  friend bool operator==(const node_join&, const node_join&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_join& x) {
  return f(caf::meta::type_name("node_join"), x.token, x.info, x.agent);
}

/// The head's cluster registry (`actorllm node --head`).
using cluster_registry_actor = caf::typed_actor<
    /// A node joins; refused with a wrong token (before anything else) or a node id already taken.
    caf::replies_to<join_atom, node_join>::with<caf::ok_atom>,
    /// The nodes, for a client presenting the token (engines, `actorllm status`, `actorllm check`).
    caf::replies_to<caf::get_atom, nodes_atom, std::string>::with<std::vector<cluster_node>>>;

}  // namespace actorllm::proto
