// The worker root actor and the shard arguments it builds for each assignment.
#include "actors/runtime/worker_actor.hpp"

#include "actorllm/proto/error.hpp"
#include "actors/cluster/custom_all_reduce_check.hpp"
#include "actors/cluster/gpu_check_peers.hpp"
#include "actors/executors/mp_executor.hpp"
#include "actors/runtime/shard_actor.hpp"
#include "comm/abort_registry.hpp"
#include "comm/check/comm_check.hpp"
#include "comm/comm_error.hpp"
#include "comm/device_rendezvous.hpp"
#include "comm/device_transport_choice.hpp"
#include "comm/gloo_collective.hpp"
#include "comm/gloo_group.hpp"
#include "comm/gloo_pipe.hpp"
#include "comm/interprocess_collective.hpp"
#include "comm/rendezvous_store.hpp"
#include "kernels/device.hpp"
#include "comm/device_communicator.hpp"
#include "comm/check/nccl_check.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

namespace actorllm::actors {
namespace {

/// The rendezvous store over the engine's registry: blocking requests from the shard's own thread (it runs in a
/// detached actor, so blocking there stalls nobody else).
class registry_store final : public comm::rendezvous_store {
 public:
  registry_store(caf::actor_system& sys, proto::worker_registry_actor registry)
      : sys_(sys), registry_(std::move(registry)) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    caf::scoped_actor self{sys_};
    std::optional<std::string> error;
    self->request(registry_, std::chrono::seconds{30}, proto::store_set_atom::value, key,
                  std::string{value.begin(), value.end()})
        .receive([](caf::ok_atom) {}, [&](caf::error& err) { error = sys_.render(err); });
    if (error)
      throw comm::comm_error(fmt::format("rendezvous: cannot set '{}' at the engine's registry: {}", key, *error));
  }

  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    caf::scoped_actor self{sys_};
    std::optional<std::string> error;
    std::vector<char> value;
    self->request(registry_, timeout, proto::store_get_atom::value, key)
        .receive([&](std::string& v) { value.assign(v.begin(), v.end()); },
                 [&](caf::error& err) { error = sys_.render(err); });
    if (error)
      throw comm::comm_error(fmt::format("rendezvous: no value for '{}' from the engine's registry within {} ms: {}",
                                         key, timeout.count(), *error));
    return value;
  }

 private:
  caf::actor_system& sys_;
  proto::worker_registry_actor registry_;
};

/// False when ACTORLLM_SHM_COLLECTIVE is 0, off or false: TP collectives then take Gloo even within one host.
bool shm_collective_allowed() {
  const char* env = std::getenv("ACTORLLM_SHM_COLLECTIVE");
  if (env == nullptr)
    return true;
  const std::string_view v{env};
  return v != "0" && v != "off" && v != "false";
}

/// The NCCL communicator of group `name` (this rank `rank` of `size`, on `be`) when every rank is on a GPU of its own
/// with NCCL: each publishes its GPU under the group's key and all decide alike (comm::choose_device_transport), then
/// rank 0's unique id goes round. Null when the group stays on the host transports (`why` says why). The abort joins
/// the process's abort_registry, which the worker aborts when its engine is gone. Throws when ACTORLLM_NCCL is
/// malformed, or is 1 and NCCL is impossible (naming why).
std::optional<device_communicator> try_nccl(comm::rendezvous_store& store, const std::string& name, int rank, int size,
                                            backend& be, std::chrono::milliseconds timeout, std::string& why) {
  if (be.where().kind != device_kind::cuda) {
    why = "not on a GPU";
    return std::nullopt;
  }
  const char* env = std::getenv("ACTORLLM_NCCL");
  const std::optional<comm::nccl_mode> mode = comm::parse_nccl_mode(env);
  if (!mode)
    throw comm::comm_error(fmt::format("ACTORLLM_NCCL={}: expected auto, 1 or 0", env));
  const std::string key = comm::device_group_key(name, 0);  // a replica's restart takes a new name prefix
  const auto ranks =
      comm::exchange_rank_devices(store, key, rank, size, comm::rank_device{gpu_identity(be), nccl_built()}, timeout);
  const comm::device_transport_choice choice = comm::choose_device_transport(ranks, *mode);
  if (!choice.error.empty())
    throw comm::comm_error(fmt::format("{}: {}", name, choice.error));
  why = choice.reason;
  if (choice.transport != comm::device_transport::nccl)
    return std::nullopt;
  const std::vector<char> id = comm::exchange_unique_id(store, key, rank, &make_nccl_unique_id, timeout);
  device_communicator dc = make_nccl_communicator(id, rank, size, be, name, timeout);
  comm::abort_registry::process().add(dc.abort);
  return dc;
}

/// Hidden states over a two-rank Gloo group: rank 0 is the earlier stage, rank 1 the later one.
class gloo_activation_link final : public activation_link {
 public:
  explicit gloo_activation_link(std::shared_ptr<comm::gloo_group> group) : pipe_(group), group_(std::move(group)) {}
  // Gloo moves host memory: the CPU backend's tensors are host memory already (a device backend brings its own
  // link over NCCL send/recv).
  void send(uint64_t step_id, const tensor& hidden) override {
    check_host(hidden);
    pipe_.send(1, step_id & comm::gloo_pipe::max_tag, hidden.data_as<float>(), hidden.numel());
  }
  void recv(uint64_t step_id, const tensor& hidden) override {
    check_host(hidden);
    pipe_.recv(0, step_id & comm::gloo_pipe::max_tag, hidden.data_as<float>(), hidden.numel());
  }

 private:
  static void check_host(const tensor& t) {
    if (t.empty() || t.type != dtype::f32 || t.where().kind != device_kind::cpu)
      throw comm::comm_error("hidden states over Gloo must be f32 host memory, got " +
                             (t.empty() ? std::string("no tensor") : t.describe()));
  }

  comm::gloo_pipe pipe_;
  std::shared_ptr<comm::gloo_group> group_;
};

/// A check's figures in its result message: Gloo's comm::comm_check_report and NCCL's nccl_check_report have the
/// same fields.
template <class Report>
void put_figures(const Report& r, proto::comm_check_result& out) {
  out.all_reduce_ok = r.all_reduce_ok;
  out.all_reduce_latency_us = r.all_reduce_latency_us;
  out.all_reduce_bus_gbs = r.all_reduce_bus_gbs;
  for (const auto& p : r.pairs)
    out.pairs.push_back({p.peer, p.ok, p.latency_us, p.bandwidth_gbs, p.error});
  out.error = r.error;
}

/// The NCCL half of `actorllm check` on this worker: every rank says which GPU it takes (its device index on the
/// node mod the GPUs it sees: the one CUDA_VISIBLE_DEVICES leaves it on a node that reports GPUs, one GPU per CPU
/// slice on a node that reports `--cpu-devices`), all decide alike whether NCCL applies
/// (comm::choose_device_transport), and if it does they measure over one communicator whose unique id travels through
/// the registry's store.
proto::comm_check_result nccl_check(caf::actor_system& sys, proto::worker_registry_actor registry,
                                    const proto::comm_check_request& req) {
  proto::comm_check_result out;
  out.rank = req.rank;
  out.host = data_plane_host();
  out.transport = "nccl";
  try {
    registry_store store{sys, registry};
    const std::chrono::milliseconds timeout{req.timeout_ms};
    const std::string key = comm::device_group_key(req.group_name, 0);
    gpu_check_peers peers = meet_gpu_check_peers(store, req, timeout);
    const comm::device_transport_choice choice =
        comm::choose_device_transport(peers.devices, comm::nccl_mode::automatic);
    if (choice.transport != comm::device_transport::nccl) {
      out.skipped = choice.reason;
      return out;
    }
    const std::vector<char> id = comm::exchange_unique_id(store, key, req.rank, &make_nccl_unique_id, timeout);
    nccl_check_options options;
    options.small_floats = req.small_floats;
    options.large_floats = req.large_floats;
    options.iterations = req.iterations;
    out.transport = "nccl " + nccl_version();
    put_figures(run_nccl_check(id, req.rank, req.world, *peers.be, req.group_name, timeout, options), out);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

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

/// The link of one pipeline hop (group `name`, this side `rank`: 0 sends, 1 receives): NCCL when both sides are on
/// GPUs of their own with NCCL (as for a TP group), else Gloo over host memory.
std::unique_ptr<activation_link> make_activation_link(comm::rendezvous_store& store, const std::string& name, int rank,
                                                      backend& be, const comm::gloo_group_options& options) {
  std::string why;
  if (auto dc = try_nccl(store, name, rank, 2, be, options.timeout, why)) {
    if (rank == 0)
      log::info("worker", "{}: hidden states over NCCL {} ({})", name, nccl_version(), why);
    return std::make_unique<nccl_activation_link>(std::move(*dc));
  }
  auto group = std::make_shared<comm::gloo_group>(store, name, rank, 2, options);
  return std::make_unique<gloo_activation_link>(std::move(group));
}

using check_actor = caf::typed_actor<
    caf::replies_to<proto::comm_check_atom, proto::comm_check_request>::with<proto::comm_check_result>>;

check_actor::behavior_type check_behavior(check_actor::pointer self, proto::worker_registry_actor registry) {
  return {
      [self, registry](proto::comm_check_atom, proto::comm_check_request& req) {
        proto::comm_check_result out;
        out.rank = req.rank;
        out.host = data_plane_host();
        if (req.transport == "nccl") {
          out = nccl_check(self->system(), registry, req);
          self->quit();
          return out;
        }
        if (req.transport == "custom") {
          registry_store store{self->system(), registry};
          out = run_custom_all_reduce_check(store, req);
          out.host = data_plane_host();
          self->quit();
          return out;
        }
        out.transport = "gloo/tcp";
        try {
          registry_store store{self->system(), registry};
          comm::gloo_group_options options;
          options.host = out.host;
          options.timeout = std::chrono::milliseconds{req.timeout_ms};
          auto group = std::make_shared<comm::gloo_group>(store, req.group_name, req.rank, req.world, options);
          comm::comm_check_options check;
          check.small_floats = req.small_floats;
          check.large_floats = req.large_floats;
          check.iterations = req.iterations;
          put_figures(comm::run_comm_check(group, check), out);
        } catch (const std::exception& e) {
          out.error = e.what();
        }
        self->quit();
        return out;
      },
  };
}

}  // namespace

shard_args make_worker_shard_args(caf::actor_system& sys, const proto::shard_assignment& a,
                                  proto::worker_registry_actor registry) {
  shard_args args;
  args.model_dir = a.model_dir;
  args.spec = model::shard_spec{a.tp_rank, a.tp_size, a.layer_begin, a.layer_end};
  args.spec.expert_parallel = a.expert_parallel;
  args.spec.dcp_size = a.dcp_size;
  args.spec.dcp_interleave = a.dcp_interleave;
  args.spec.pcp_size = a.pcp_size;
  args.spec.pcp_rank = a.pcp_rank;
  args.stage = a.stage;
  auto format = model::parse_load_format(a.load_format);
  args.load.format = format.value_or(model::load_format::automatic);
  if (a.dtype != "auto")
    args.load.weight_dtype = parse_dtype(a.dtype);
  if (!a.quantization.empty())
    args.load.quantization = a.quantization;
  // The engine checked the device against its own build; this worker's binary (another node's) may lack it.
  const device_choice chosen = resolve_device(a.device);
  if (!chosen.error.empty())
    throw actorllm::error{errc::invalid_config, chosen.error};
  if (std::string why = device_unusable_reason(chosen.kind); !why.empty())
    throw actorllm::error{errc::invalid_config, why};
  args.device = chosen.kind;
  args.load.seed = a.seed;
  args.n_threads = a.n_threads;
  args.device_offset = a.device_offset;
  args.samples = a.samples;
  args.enforce_eager = a.enforce_eager;
  args.max_num_seqs = a.max_num_seqs;
  args.max_model_len = a.max_model_len;
  args.lora = {a.max_loras, a.max_lora_rank, a.max_cpu_loras};
  args.next = a.next;
  auto store = std::make_shared<registry_store>(sys, registry);
  comm::gloo_group_options options;
  options.host = a.data_plane_host.empty() ? data_plane_host() : a.data_plane_host;
  options.timeout = std::chrono::milliseconds{a.collective_timeout_ms};
  const std::string prefix = a.rendezvous_prefix;
  // The stage's group: its TP group, times the copies of it under prefill context parallelism.
  const int32_t group_rank = args.spec.group_rank(), group_size = args.spec.group_size();
  if (group_size > 1) {
    args.make_collective = [store, options, prefix, stage = a.stage, rank = group_rank,
                            size = group_size](backend& be) {
      const std::string name = fmt::format("{}/tp/{}", prefix, stage);
      std::string why;
      if (auto dc = try_nccl(*store, name, rank, size, be, options.timeout, why)) {
        if (rank == 0)
          log::info("worker", "stage {}: TP collectives over NCCL {} ({})", stage, nccl_version(), why);
        return std::move(dc->collective);
      }
      if (rank == 0 && be.where().kind == device_kind::cuda)
        log::info("worker", "stage {}: GPU collectives staged through host memory: {}", stage, why);
      // Ranks of one host share memory (the mp executor's always do, a cluster's when the placement kept the TP
      // group inside a node); Gloo connects the others. ACTORLLM_SHM_COLLECTIVE=0 takes Gloo everywhere.
      if (shm_collective_allowed()) {
        comm::interprocess_options shm_options;
        shm_options.timeout = options.timeout;
        if (auto shm = comm::interprocess_collective::try_create(*store, name + "/shm", rank, size, shm_options)) {
          if (rank == 0)
            log::info("worker", "stage {}: the {} TP ranks share memory for their collectives", stage, size);
          return std::unique_ptr<tp_collective>(std::move(shm));
        }
        if (rank == 0)
          log::info("worker", "stage {}: the TP ranks are not all on one host: collectives over Gloo (TCP)", stage);
      } else if (rank == 0) {
        log::info("worker", "stage {}: ACTORLLM_SHM_COLLECTIVE is off: TP collectives over Gloo (TCP)", stage);
      }
      auto group = std::make_shared<comm::gloo_group>(*store, name, rank, size, options);
      return std::unique_ptr<tp_collective>(std::make_unique<comm::gloo_collective>(std::move(group)));
    };
  }
  if (a.stage > 0) {
    args.make_prev_link = [store, options, prefix, stage = a.stage, rank = group_rank](backend& be) {
      return make_activation_link(*store, fmt::format("{}/pp/{}/{}", prefix, stage - 1, rank), 1, be, options);
    };
  }
  if (a.stage + 1 < a.pp_size) {
    args.make_next_link = [store, options, prefix, stage = a.stage, rank = group_rank](backend& be) {
      return make_activation_link(*store, fmt::format("{}/pp/{}/{}", prefix, stage, rank), 0, be, options);
    };
  }
  return args;
}

proto::worker_actor spawn_worker(caf::actor_system& sys, proto::worker_registry_actor registry, int32_t index) {
  auto behavior = [&sys, registry, index](proto::worker_actor::pointer self) -> proto::worker_actor::behavior_type {
    return {
        [self, &sys, registry](proto::spawn_shard_atom, proto::shard_assignment& a) -> caf::result<proto::shard_actor> {
          if (a.model_dir.empty() || a.tp_size < 1 || a.tp_rank < 0 || a.tp_rank >= a.tp_size || a.pcp_size < 1 ||
              a.pcp_rank < 0 || a.pcp_rank >= a.pcp_size)
            return proto::make_error(errc::invalid_config, "an invalid shard assignment");
          log::info("worker", "hosting replica {} stage {} rank {} (layers {}-{})", a.dp_rank, a.stage, a.tp_rank,
                    a.layer_begin, a.layer_end - 1);
          shard_args args;
          try {
            args = make_worker_shard_args(sys, a, registry);
          } catch (const actorllm::error& e) {
            return proto::make_error(e.code(), e.what());
          }
          auto shard = spawn_shard(sys, std::move(args));
          self->link_to(shard);  // the shard goes down with its worker and vice versa
          return shard;
        },
        [index](proto::ping_atom) { return index; },
        [self, &sys, registry](proto::comm_check_atom, proto::comm_check_request& req) {
          // The check blocks in Gloo: it runs in a detached actor of its own, which answers for the worker.
          auto checker = sys.spawn<caf::detached>(check_behavior, registry);
          return self->delegate(checker, proto::comm_check_atom::value, std::move(req));
        },
    };
  };
  return sys.spawn(behavior);
}

}  // namespace actorllm::actors
