// The executor rule of docs/DESIGN.md §4, one branch per case, each message carrying the numbers it depends on.
#include "actors/executors/executor_choice.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorllm::actors {

namespace {

constexpr std::string_view valid_backends = "uni, mp, cluster";
constexpr std::string_view how_to_configure_cluster =
    "give --cluster-address HEAD:PORT, or head_address = \"HEAD:PORT\" under [cluster] in the config file";

std::string_view device_word(bool gpu) { return gpu ? "GPU" : "CPU"; }

// "tensor_parallel_size × pipeline_parallel_size = 8", with data_parallel_size in front when there are replicas.
std::string describe_product(const executor_inputs& in) {
  if (in.replicas > 1)
    return fmt::format("data_parallel_size {} × tensor_parallel_size × pipeline_parallel_size {} = {}", in.replicas,
                       in.world_size, devices_needed(in));
  return fmt::format("tensor_parallel_size × pipeline_parallel_size = {}", in.world_size);
}

// "world size 4", or "dp 2 × world size 4 = 8" with replicas.
std::string describe_world(const executor_inputs& in) {
  if (in.replicas > 1)
    return fmt::format("dp {} × world size {} = {}", in.replicas, in.world_size, devices_needed(in));
  return fmt::format("world size {}", in.world_size);
}

// The cluster backend's own check, shared by a request and the default.
executor_choice use_cluster(const executor_inputs& in, std::string_view why) {
  if (in.cluster_devices < devices_needed(in))
    return fmt::format("{} needs {} devices; the cluster has {} (this node {})", describe_product(in),
                       devices_needed(in), in.cluster_devices, in.local_devices);
  return executor_decision{executor_backend::cluster,
                           fmt::format("{}; the cluster has {} devices for it", why, in.cluster_devices)};
}

executor_choice requested(const executor_inputs& in, executor_backend backend) {
  const int32_t needed = devices_needed(in);
  switch (backend) {
    case executor_backend::uni:
      if (in.gpu && needed > in.local_devices)
        return executor_decision{
            backend, fmt::format("uni requested; warning: {} shards share this node's {} GPU(s): they share its memory "
                                 "and run at one GPU's speed",
                                 needed, in.local_devices)};
      return executor_decision{backend,
                               fmt::format("uni requested: {} shard(s) run as threads of this process", needed)};
    case executor_backend::mp:
      if (in.gpu && needed > in.local_devices)
        return fmt::format(
            "the mp executor runs one worker per GPU: {} needs {} GPUs and this node has {}; use cluster "
            "for more nodes, or uni to share the GPUs",
            describe_world(in), needed, in.local_devices);
      if (needed > in.local_devices)
        return executor_decision{backend, fmt::format("mp requested: {} worker processes share this node's {} CPU "
                                                      "device(s)",
                                                      needed, in.local_devices)};
      return executor_decision{backend, fmt::format("mp requested: {} worker processes on this node's {} {} device(s)",
                                                    needed, in.local_devices, device_word(in.gpu))};
    case executor_backend::cluster:
      if (!in.cluster_configured)
        return fmt::format("the cluster executor needs a cluster and none is configured: {}", how_to_configure_cluster);
      return use_cluster(in, fmt::format("cluster requested for {}", describe_world(in)));
  }
  return fmt::format("unknown executor backend {}", static_cast<int>(backend));
}

}  // namespace

std::optional<executor_backend> parse_executor_backend(std::string_view name) {
  if (name == "uni")
    return executor_backend::uni;
  if (name == "mp")
    return executor_backend::mp;
  if (name == "cluster")
    return executor_backend::cluster;
  return std::nullopt;
}

std::string executor_backend_error(std::string_view given) {
  if (given == "ray")
    return fmt::format(
        "ray is not needed: use cluster (actorllm starts its own workers on a cluster's nodes; valid values: {})",
        valid_backends);
  return fmt::format("'{}' is not an executor backend; valid values: {}", given, valid_backends);
}

std::string_view to_string(executor_backend backend) {
  switch (backend) {
    case executor_backend::uni:
      return "uni";
    case executor_backend::mp:
      return "mp";
    case executor_backend::cluster:
      return "cluster";
  }
  return "unknown";
}

int32_t devices_needed(const executor_inputs& in) { return in.world_size * std::max(1, in.replicas); }

executor_choice choose_executor(const executor_inputs& in) {
  if (in.world_size < 1)
    return fmt::format("the world size (tensor_parallel_size × pipeline_parallel_size) must be at least 1, got {}",
                       in.world_size);
  if (in.replicas < 1)
    return fmt::format("data_parallel_size must be at least 1, got {}", in.replicas);
  const int32_t needed = devices_needed(in);
  if (in.local_devices < 0 || in.cluster_devices < 0)
    return fmt::format("device counts cannot be negative: this node {}, the cluster {}", in.local_devices,
                       in.cluster_devices);
  if (in.requested)
    return requested(in, *in.requested);

  if (in.world_size == 1 && (in.replicas == 1 || !in.gpu || needed <= in.local_devices))
    return executor_decision{
        executor_backend::uni,
        in.replicas > 1
            ? fmt::format("world size 1: each of the {} replicas' one shard runs in this process", in.replicas)
            : std::string{"world size 1: the one shard runs in this process"}};
  if (in.local_devices >= needed)
    return executor_decision{executor_backend::mp,
                             fmt::format("{} fits this node's {} {} device(s): one worker process per shard",
                                         describe_world(in), in.local_devices, device_word(in.gpu))};
  if (in.cluster_configured)
    return use_cluster(in,
                       fmt::format("{} is more than this node's {} device(s)", describe_world(in), in.local_devices));
  if (!in.gpu)
    return executor_decision{
        executor_backend::uni,
        fmt::format("shards run as threads of this process: this node has {} CPU device(s) for a world of {}; give "
                    "--cpu-devices or a cluster for processes",
                    in.local_devices, needed)};
  return fmt::format("{} needs {} devices; this node has {} and no cluster is configured ({})", describe_product(in),
                     needed, in.local_devices, how_to_configure_cluster);
}

}  // namespace actorllm::actors
