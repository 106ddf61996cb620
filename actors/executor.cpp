// Executor dispatch: see executor.hpp.
#include "actors/executor.hpp"

#include "actorllm/error.hpp"
#include "actors/cluster_executor.hpp"
#include "actors/executor_choice.hpp"
#include "actors/mp_executor.hpp"
#include "kernels/device.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

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

std::string resolve_executor(const engine_config& config) {
  executor_inputs in;
  if (!config.distributed_executor_backend.empty()) {
    in.requested = parse_executor_backend(config.distributed_executor_backend);
    if (!in.requested)
      throw actorllm::error{errc::invalid_config, "distributed_executor_backend: " +
                                                      executor_backend_error(config.distributed_executor_backend)};
  }
  in.world_size = config.tensor_parallel_size * config.pipeline_parallel_size;
  // An unusable device is refused with the other settings (plan_replica); here it only shapes the choice.
  in.gpu = resolve_device(config.device).kind == device_kind::cuda;
  in.local_devices = in.gpu ? visible_gpu_count() : local_cpu_devices();
  in.cluster_configured = !config.cluster_address.empty();
  in.cluster_devices = in.world_size;  // checked exactly against the nodes when the cluster replica is placed
  auto choice = choose_executor(in);
  if (auto* err = std::get_if<std::string>(&choice))
    throw actorllm::error{errc::invalid_config, *err};
  const auto& decision = std::get<executor_decision>(choice);
  log::info("executor", "executor {}: {}", to_string(decision.backend), decision.reason);
  return std::string{to_string(decision.backend)};
}

replica build_replica(caf::actor_system& sys, const engine_config& config, const replica_slot& slot) {
  (void)slot;  // TODO(dp): device offsets and thread shares per replica
  if (config.distributed_executor_backend == "mp")
    return build_mp_replica(sys, config);
  if (config.distributed_executor_backend == "cluster")
    return build_cluster_replica(sys, config);
  return build_uni_replica(sys, config);
}

}  // namespace actorllm::actors
