// Which executor runs a replica's shards: the one --distributed-executor-backend asks for, checked against what
// this node and the cluster have, or the default for the world size (docs/DESIGN.md §4). Pure logic, no CAF, so
// every branch of the rule is tested on its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace actorllm::actors {

/// Where the shards live: threads of this process, worker processes on this node, or workers on a cluster's nodes.
enum class executor_backend { uni, mp, cluster };

/// "uni", "mp" or "cluster" (exact, lower case); anything else, vLLM's "ray" included, is nullopt.
std::optional<executor_backend> parse_executor_backend(std::string_view name);

/// The message for a name parse_executor_backend() refused, listing the valid values; "ray" gets "ray is not
/// needed: use cluster". It names no flag or key, so the caller prefixes the one the value came from.
std::string executor_backend_error(std::string_view given);

/// "uni", "mp" or "cluster".
std::string_view to_string(executor_backend backend);

/// What the choice depends on.
struct executor_inputs {
  std::optional<executor_backend> requested;  ///< --distributed-executor-backend; nullopt: choose by the rule
  int32_t world_size = 1;                     ///< tensor_parallel_size × pipeline_parallel_size (one replica)
  /// Data-parallel replicas whose shards this node runs (each needs world_size devices of its own); the devices
  /// compared with local_devices are world_size × replicas.
  int32_t replicas = 1;
  int32_t local_devices = 0;        ///< devices of this node (GPUs, or CPU devices when !gpu)
  bool gpu = false;                 ///< whether the shards run on GPUs (CPU devices may be oversubscribed)
  bool cluster_configured = false;  ///< whether a cluster head is configured
  int32_t cluster_devices = 0;      ///< devices of all the cluster's nodes together
};

/// The backend chosen and why, in words fit for the startup log (it carries any warning, e.g. shards sharing a GPU).
struct executor_decision {
  executor_backend backend = executor_backend::uni;
  std::string reason;
};

/// A decision, or the message saying why no backend can run this world (with the numbers).
using executor_choice = std::variant<executor_decision, std::string>;

/// world_size × replicas: the devices the replicas placed on this node need together.
int32_t devices_needed(const executor_inputs& in);

/// The executor for `in`. A requested backend is taken when it can run: `mp` on GPUs needs world_size devices on
/// this node; `cluster` needs a configured cluster with world_size devices; `uni` always runs (on GPUs with more
/// shards than devices the reason warns that shards share a GPU). Without a request: world size 1 → uni; this
/// node has world_size devices → mp; a cluster is configured → cluster (an error if it has too few devices); on
/// CPU → uni, shards as threads; on GPU → an error naming the devices needed and those of this node.
executor_choice choose_executor(const executor_inputs& in);

}  // namespace actorllm::actors
