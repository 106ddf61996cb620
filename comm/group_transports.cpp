// The transports a worker's shard builds for its groups and its pipeline hops.
#include "comm/group_transports.hpp"

#include "comm/abort_registry.hpp"
#include "comm/comm_error.hpp"
#include "comm/device_communicator.hpp"
#include "comm/gloo_collective.hpp"
#include "comm/gloo_pipe.hpp"
#include "comm/interprocess_collective.hpp"
#include "comm/transport_choice.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <optional>

namespace actorllm::comm {

namespace {

/// The NCCL communicator of group `name` (this rank `rank` of `size`, on `be`) when every rank is on a GPU of its own
/// with NCCL: each publishes its GPU under the group's key and all decide alike (choose_device_transport), then
/// rank 0's unique id goes round. Null when the group stays on the host transports (`why` says why). The abort joins
/// the process's abort_registry, which the worker aborts when its engine is gone. Throws when ACTORLLM_NCCL is
/// malformed, or is 1 and NCCL is impossible (naming why).
std::optional<device_communicator> try_nccl(rendezvous_store& store, const std::string& name, int rank, int size,
                                            backend& be, std::chrono::milliseconds timeout, std::string& why) {
  if (be.where().kind != device_kind::cuda) {
    why = "not on a GPU";
    return std::nullopt;
  }
  const char* env = std::getenv("ACTORLLM_NCCL");
  const std::optional<nccl_mode> mode = parse_nccl_mode(env);
  if (!mode)
    throw comm_error(fmt::format("ACTORLLM_NCCL={}: expected auto, 1 or 0", env));
  const std::string key = device_group_key(name, 0);  // a replica's restart takes a new name prefix
  const auto ranks =
      exchange_rank_devices(store, key, rank, size, rank_device{gpu_identity(be), nccl_built()}, timeout);
  const device_transport_choice choice = choose_device_transport(ranks, *mode);
  if (!choice.error.empty())
    throw comm_error(fmt::format("{}: {}", name, choice.error));
  why = choice.reason;
  if (choice.transport != device_transport::nccl)
    return std::nullopt;
  const std::vector<char> id = exchange_unique_id(store, key, rank, &make_nccl_unique_id, timeout);
  device_communicator dc = make_nccl_communicator(id, rank, size, be, name, timeout);
  abort_registry::process().add(dc.abort);
  return dc;
}

/// Hidden states over a two-rank Gloo group: rank 0 is the earlier stage, rank 1 the later one.
class gloo_activation_link final : public activation_link {
 public:
  explicit gloo_activation_link(std::shared_ptr<gloo_group> group) : pipe_(group), group_(std::move(group)) {}
  // Gloo moves host memory: the CPU backend's tensors are host memory already (a device backend brings its own
  // link over NCCL send/recv).
  void send(uint64_t step_id, const tensor& hidden) override {
    check_host(hidden);
    pipe_.send(1, step_id & gloo_pipe::max_tag, hidden.data_as<float>(), hidden.numel());
  }
  void recv(uint64_t step_id, const tensor& hidden) override {
    check_host(hidden);
    pipe_.recv(0, step_id & gloo_pipe::max_tag, hidden.data_as<float>(), hidden.numel());
  }

 private:
  static void check_host(const tensor& t) {
    if (t.empty() || t.type != dtype::f32 || t.where().kind != device_kind::cpu)
      throw comm_error("hidden states over Gloo must be f32 host memory, got " +
                       (t.empty() ? std::string("no tensor") : t.describe()));
  }

  gloo_pipe pipe_;
  std::shared_ptr<gloo_group> group_;
};

/// Hidden states over a two-rank NCCL communicator between the GPUs of two stages: rank 0 is the earlier stage, rank
/// 1 the later one. The tensors stay on the GPUs; transfers match in plan order (NCCL has no tags, and a shard runs
/// its steps in plan order), so the step id only names the step in errors.
class nccl_activation_link final : public activation_link {
 public:
  explicit nccl_activation_link(device_communicator comm) : comm_(std::move(comm)) {}
  void send(uint64_t, const tensor& hidden) override { comm_.peer_link->send(hidden, 1); }
  void recv(uint64_t, const tensor& hidden) override { comm_.peer_link->recv(hidden, 0); }
  bool takes_device_tensors() const override { return true; }
  void raise_if_broken() override { comm_.peer_link->raise_if_broken(); }

 private:
  device_communicator comm_;
};

}  // namespace

std::unique_ptr<tp_collective> make_group_collective(rendezvous_store& store, const std::string& name, int rank,
                                                     int size, backend& be, const gloo_group_options& options,
                                                     int32_t stage, std::string_view kind) {
  std::string why;
  if (auto dc = try_nccl(store, name, rank, size, be, options.timeout, why)) {
    if (rank == 0)
      log::info("worker", "stage {}: {} collectives over NCCL {} ({})", stage, kind, nccl_version(), why);
    return std::move(dc->collective);
  }
  if (rank == 0 && be.where().kind == device_kind::cuda)
    log::info("worker", "stage {}: GPU collectives staged through host memory: {}", stage, why);
  // Ranks of one host share memory (the mp executor's always do, a cluster's when the placement kept the TP group
  // inside a node); Gloo connects the others. ACTORLLM_SHM_COLLECTIVE=0 takes Gloo everywhere.
  if (shm_collective_allowed()) {
    interprocess_options shm_options;
    shm_options.timeout = options.timeout;
    if (auto shm = interprocess_collective::try_create(store, name + "/shm", rank, size, shm_options)) {
      if (rank == 0)
        log::info("worker", "stage {}: the {} {} ranks share memory for their collectives", stage, size, kind);
      return std::unique_ptr<tp_collective>(std::move(shm));
    }
    if (rank == 0)
      log::info("worker", "stage {}: the {} ranks are not all on one host: collectives over Gloo (TCP)", stage, kind);
  } else if (rank == 0) {
    log::info("worker", "stage {}: ACTORLLM_SHM_COLLECTIVE is off: {} collectives over Gloo (TCP)", stage, kind);
  }
  auto group = std::make_shared<gloo_group>(store, name, rank, size, options);
  return std::unique_ptr<tp_collective>(std::make_unique<gloo_collective>(std::move(group)));
}

/// The link of one pipeline hop (group `name`, this side `rank`: 0 sends, 1 receives): NCCL when both sides are on
/// GPUs of their own with NCCL (as for a TP group), else Gloo over host memory.
std::unique_ptr<activation_link> make_activation_link(rendezvous_store& store, const std::string& name, int rank,
                                                      backend& be, const gloo_group_options& options) {
  std::string why;
  if (auto dc = try_nccl(store, name, rank, 2, be, options.timeout, why)) {
    if (rank == 0)
      log::info("worker", "{}: hidden states over NCCL {} ({})", name, nccl_version(), why);
    return std::make_unique<nccl_activation_link>(std::move(*dc));
  }
  auto group = std::make_shared<gloo_group>(store, name, rank, 2, options);
  return std::make_unique<gloo_activation_link>(std::move(group));
}

}  // namespace actorllm::comm
