// Executor dispatch: see executor.hpp.
#include "actors/executors/executor.hpp"

#include "actorllm/error.hpp"
#include "actors/executors/cluster_executor.hpp"
#include "actors/executors/executor_choice.hpp"
#include "actors/executors/lockstep_replicas.hpp"
#include "actors/executors/mp_executor.hpp"
#include "actors/executors/uni_executor.hpp"
#include "kernels/device.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace actorllm::actors {

int32_t local_cpu_devices() {
  const char* env = std::getenv("ACTORLLM_CPU_DEVICES");
  if (env == nullptr || *env == '\0')
    return 1;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 4096)
    throw actorllm::error{errc::invalid_config,
                          fmt::format("ACTORLLM_CPU_DEVICES: '{}' is not a device count in [1, 4096]", env)};
  return static_cast<int32_t>(n);
}

int32_t local_replica_count(const engine_config& config) {
  const int32_t dp = std::max(1, config.data_parallel_size);
  return config.data_parallel_size_local > 0 ? std::min(config.data_parallel_size_local, dp) : dp;
}

std::string resolve_executor(const engine_config& config) {
  if (config.data_parallel_size < 1)
    throw actorllm::error{errc::invalid_config, fmt::format("data_parallel_size (--data-parallel-size) must be at "
                                                            "least 1, got {}",
                                                            config.data_parallel_size)};
  if (config.data_parallel_size_local < 0 || config.data_parallel_size_local > config.data_parallel_size)
    throw actorllm::error{errc::invalid_config,
                          fmt::format("data_parallel_size_local (--data-parallel-size-local) must be in [0, "
                                      "data_parallel_size {}], got {}",
                                      config.data_parallel_size, config.data_parallel_size_local)};
  if (config.data_parallel_rank < -1 || config.data_parallel_rank >= config.data_parallel_size)
    throw actorllm::error{
        errc::invalid_config,
        fmt::format("data_parallel_rank (--data-parallel-rank) must be in [0, data_parallel_size {}), "
                    "got {}",
                    config.data_parallel_size, config.data_parallel_rank)};
  const int32_t local = local_replica_count(config);
  const bool remote_replicas = config.data_parallel_rank < 0 && local < config.data_parallel_size;
  if (remote_replicas) {
    const std::string which = fmt::format(
        "data_parallel_size_local (--data-parallel-size-local) {} < "
        "data_parallel_size {}: replicas {}..{} run on a cluster's nodes",
        local, config.data_parallel_size, local, config.data_parallel_size - 1);
    if (config.cluster_address.empty())
      throw actorllm::error{errc::invalid_config, which + ", so cluster_address (--cluster-address) must be set"};
    if (config.distributed_executor_backend == "cluster")
      throw actorllm::error{errc::invalid_config,
                            which +
                                " and the local ones on this node, but distributed_executor_backend "
                                "(--distributed-executor-backend) cluster puts every replica on the cluster: "
                                "leave out one of the two"};
  }
  // Lockstep DP+EP runs in one process: uni, where this node has a device per rank (a GPU node with too few is
  // refused below, as for any layout).
  const bool on_gpu = resolve_device(config.device).kind == device_kind::cuda;
  if (config.distributed_executor_backend.empty() && config.enable_expert_parallel && config.data_parallel_size > 1 &&
      config.data_parallel_rank < 0 && !remote_replicas && config.pipeline_parallel_size == 1 &&
      (!on_gpu || visible_gpu_count() >= config.data_parallel_size * config.tensor_parallel_size) &&
      names_moe_model(config.model)) {
    log::info("executor",
              "executor uni: expert parallelism over {} data-parallel replicas steps them in lockstep, in one "
              "process",
              config.data_parallel_size);
    return "uni";
  }
  executor_inputs in;
  if (!config.distributed_executor_backend.empty()) {
    in.requested = parse_executor_backend(config.distributed_executor_backend);
    if (!in.requested)
      throw actorllm::error{errc::invalid_config, "distributed_executor_backend: " +
                                                      executor_backend_error(config.distributed_executor_backend)};
  }
  in.world_size =
      config.tensor_parallel_size * config.pipeline_parallel_size * std::max(1, config.prefill_context_parallel_size);
  // Replicas on this node each take tp × pp devices of their own; an external-LB rank (data_parallel_rank) takes
  // its rank's share, so the node needs as many as all its local replicas together all the same.
  in.replicas = local;
  // An unusable device is refused with the other settings (plan_replica); here it only shapes the choice.
  in.gpu = on_gpu;
  in.local_devices = in.gpu ? visible_gpu_count() : local_cpu_devices();
  // With replicas on the cluster, the local ones stay on this node: the cluster is not theirs to choose.
  in.cluster_configured = !config.cluster_address.empty() && !remote_replicas;
  // Checked exactly against the nodes when each cluster replica is placed.
  in.cluster_devices = devices_needed(in);
  auto choice = choose_executor(in);
  if (auto* err = std::get_if<std::string>(&choice))
    throw actorllm::error{errc::invalid_config, *err};
  const auto& decision = std::get<executor_decision>(choice);
  log::info("executor", "executor {}: {}", to_string(decision.backend), decision.reason);
  if (remote_replicas)
    log::info("executor", "replicas 0..{} on this node ({}), replicas {}..{} on the cluster at {}", local - 1,
              to_string(decision.backend), local, config.data_parallel_size - 1, config.cluster_address);
  return std::string{to_string(decision.backend)};
}

bool runs_on_cluster(const engine_config& config, const replica_slot& slot) {
  return config.distributed_executor_backend != "cluster" && config.data_parallel_rank < 0 &&
         slot.dp_rank >= local_replica_count(config);
}

bool uses_cluster(const engine_config& config) {
  return config.distributed_executor_backend == "cluster" ||
         runs_on_cluster(config, replica_slot{config.data_parallel_size - 1, config.data_parallel_size});
}

replica build_replica(caf::actor_system& sys, const engine_config& config, const replica_slot& slot) {
  if (runs_on_cluster(config, slot)) {
    engine_config remote = config;  // everything about it is the cluster executor's, its device checks included
    remote.distributed_executor_backend = "cluster";
    return build_cluster_replica(sys, remote, slot);
  }
  if (config.distributed_executor_backend == "mp")
    return build_mp_replica(sys, config, slot);
  if (config.distributed_executor_backend == "cluster")
    return build_cluster_replica(sys, config, slot);
  return build_uni_replica(sys, config, slot);
}

}  // namespace actorllm::actors
