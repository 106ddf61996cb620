// The cluster executor: see cluster_executor.hpp.
#include "actors/executors/cluster_executor.hpp"

#include "actorllm/error.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/executors/mp_executor.hpp"
#include "actors/executors/placement.hpp"
#include "actors/executors/worker_replica.hpp"
#include "model/model_hash.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

extern char** environ;

namespace actorllm::actors {
namespace {

[[noreturn]] void throw_config(std::string message) { throw actorllm::error{errc::invalid_config, message}; }

std::pair<std::string, uint16_t> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw_config(fmt::format("cluster_address: '{}' is not HOST:PORT", address));
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  if (port <= 0 || port > 65535)
    throw_config(fmt::format("cluster_address: '{}' has no valid port", address));
  return {address.substr(0, colon), static_cast<uint16_t>(port)};
}

/// The devices that replicas built by this process hold or are about to hold, by node: between its placement and
/// the agent's next report a replica's devices are known only here, and replicas may be built concurrently (the
/// replica set restarts one while the others serve). Keyed by node id (one cluster per engine process).
class device_claims {
 public:
  static device_claims& instance() {
    static device_claims claims;
    return claims;
  }

  /// The devices claimed on `node_id` by anyone but `owner`.
  std::vector<int32_t> taken(const std::string& node_id, uint64_t owner) {
    std::lock_guard<std::mutex> lock{mutex_};
    std::vector<int32_t> out;
    for (const auto& c : claims_)
      if (c.node_id == node_id && c.owner != owner)
        out.push_back(c.device);
    return out;
  }

  void claim(uint64_t owner, const placement& where) {
    std::lock_guard<std::mutex> lock{mutex_};
    for (const auto& slot : where.slots)
      claims_.push_back({owner, slot.node_id, slot.device});
  }

  void release(uint64_t owner) {
    std::lock_guard<std::mutex> lock{mutex_};
    std::erase_if(claims_, [owner](const claim_entry& c) { return c.owner == owner; });
  }

  uint64_t next_owner() { return next_owner_.fetch_add(1) + 1; }

  /// Places and claims under one lock, so that two replicas placed at once never pick the same device.
  template <class Place>
  auto place_and_claim(uint64_t owner, Place place) {
    std::lock_guard<std::mutex> lock{place_mutex_};
    auto result = place();
    if (auto* where = std::get_if<placement>(&result))
      claim(owner, *where);
    return result;
  }

 private:
  struct claim_entry {
    uint64_t owner = 0;
    std::string node_id;
    int32_t device = 0;
  };
  std::mutex place_mutex_;
  std::mutex mutex_;
  std::vector<claim_entry> claims_;
  std::atomic<uint64_t> next_owner_{0};
};

/// Starts workers through the agents of the nodes the placement chose.
class cluster_launcher final : public worker_launcher {
 public:
  cluster_launcher(caf::actor_system& sys, std::vector<proto::cluster_node> nodes, placement where,
                   std::string model_dir, std::string model_hash, int32_t dp_rank, int32_t dp_size,
                   uint64_t claim_owner)
      : sys_(sys),
        nodes_(std::move(nodes)),
        where_(std::move(where)),
        model_dir_(std::move(model_dir)),
        model_hash_(std::move(model_hash)),
        dp_rank_(dp_rank),
        dp_size_(dp_size),
        claim_owner_(claim_owner) {
    for (const auto& n : nodes_)
      by_id_[n.info.node_id] = &n;
  }

  ~cluster_launcher() override {
    if (claim_owner_ != 0)
      device_claims::instance().release(claim_owner_);
  }

  std::string name() const override { return "cluster executor"; }

  void start(int32_t index, const std::string& host, uint16_t port, const std::string& token) override {
    const rank_slot& slot = where_.slots[static_cast<size_t>(index)];
    const proto::cluster_node& node = *by_id_.at(slot.node_id);
    proto::worker_launch launch;
    launch.registry_host = host;
    launch.registry_port = port;
    launch.index = index;
    launch.token = token;
    launch.device = slot.device;
    launch.dp_rank = dp_rank_;
    launch.stage = slot.stage;
    launch.tp_rank = slot.tp_rank;
    launch.model_dir = model_dir_;
    launch.model_hash = model_hash_;
    for (const auto& [k, v] : forwarded_environment()) {
      launch.env_names.push_back(k);
      launch.env_values.push_back(v);
    }
    token_ = token;
    caf::scoped_actor self{sys_};
    std::optional<std::string> error;
    self->request(node.agent, std::chrono::seconds{10}, proto::start_worker_atom::value, launch)
        .receive(
            [&](int32_t pid) {
              log::info("executor", "{}worker {} (stage {} rank {}) runs on node '{}' ({}) device {}, pid {}",
                        replica_prefix(dp_rank_, dp_size_), index, slot.stage, slot.tp_rank, node.info.node_id,
                        node.info.host, slot.device, pid);
            },
            [&](caf::error& err) { error = sys_.render(err); });
    if (error)
      throw std::runtime_error(fmt::format("node '{}' ({}) could not start worker {}: {}", node.info.node_id,
                                           node.info.host, index, *error));
    if (std::find(used_.begin(), used_.end(), node.agent) == used_.end())
      used_.push_back(node.agent);
  }

  std::optional<std::string> dead_worker() override { return std::nullopt; }

  int32_t threads_for(int32_t index, int32_t planned) const override {
    const auto& node = *by_id_.at(where_.slots[static_cast<size_t>(index)].node_id);
    return node.info.cores_per_device > 0 ? node.info.cores_per_device : planned;
  }

  // Each worker sees only the device its agent gave it (CUDA_VISIBLE_DEVICES): its rank picks nothing more.
  int32_t device_offset(int32_t /*planned*/) const override { return 0; }

  void stop_all() override {
    // The devices are free again once the agents stopped the workers (or the replica never started them).
    struct release_claims {
      uint64_t owner;
      ~release_claims() {
        if (owner != 0)
          device_claims::instance().release(owner);
      }
    } release{claim_owner_};
    if (token_.empty())
      return;
    caf::scoped_actor self{sys_};
    // All at once: a dead agent (it took its workers with it) costs one timeout, not one per agent.
    std::vector<decltype(self->request(used_.front(), std::chrono::seconds{2}, proto::stop_workers_atom::value,
                                       token_))>
        pending;
    for (const auto& agent : used_)
      pending.push_back(self->request(agent, std::chrono::seconds{2}, proto::stop_workers_atom::value, token_));
    for (auto& p : pending)
      p.receive([](int32_t) {}, [](caf::error&) {});
    used_.clear();
  }

 private:
  caf::actor_system& sys_;
  std::vector<proto::cluster_node> nodes_;
  placement where_;
  std::map<std::string, const proto::cluster_node*> by_id_;
  std::string model_dir_;
  std::string model_hash_;
  int32_t dp_rank_ = 0;
  int32_t dp_size_ = 1;
  uint64_t claim_owner_ = 0;  // its devices in device_claims; 0: none (actorllm check)
  std::string token_;
  std::vector<proto::node_agent_actor> used_;
};

/// The node as its agent reports it now (the head's copy is one heartbeat old: workers started since are missing).
/// nullopt when the agent does not answer in time (it is left out of the placement).
std::optional<proto::node_info> fresh_info(caf::actor_system& sys, const proto::cluster_node& node) {
  caf::scoped_actor self{sys};
  std::optional<proto::node_info> out;
  self->request(node.agent, std::chrono::seconds{5}, caf::get_atom::value, proto::nodes_atom::value)
      .receive([&](proto::node_info& info) { out = std::move(info); },
               [&](caf::error& err) {
                 log::warning("executor", "node '{}' ({}) did not answer: left out of the placement ({})",
                              node.info.node_id, node.info.host, sys.render(err));
               });
  return out;
}

}  // namespace

std::string cluster_token(const engine_config& config) {
  if (!config.cluster_token.empty())
    return config.cluster_token;
  const char* env = std::getenv("ACTORLLM_CLUSTER_TOKEN");
  return env != nullptr ? env : "";
}

std::vector<proto::cluster_node> cluster_nodes(caf::actor_system& sys, const std::string& address,
                                               const std::string& token, std::chrono::milliseconds timeout) {
  const auto [host, port] = split_address(address);
  auto head = connect_control<proto::cluster_registry_actor>(sys, host, port);
  if (!head)
    throw_config(
        fmt::format("cannot reach the cluster head at {}: {}", address, describe_connect_error(sys, head.error())));
  caf::scoped_actor self{sys};
  std::vector<proto::cluster_node> nodes;
  std::optional<std::string> error;
  self->request(*head, timeout, caf::get_atom::value, proto::nodes_atom::value, token)
      .receive([&](std::vector<proto::cluster_node>& n) { nodes = std::move(n); },
               [&](caf::error& err) { error = sys.render(err); });
  if (error)
    throw_config(fmt::format("the cluster head at {} refused: {}", address, *error));
  return nodes;
}

std::shared_ptr<worker_launcher> make_cluster_launcher(caf::actor_system& sys, std::vector<proto::cluster_node> nodes,
                                                       placement where, std::string model_dir, std::string model_hash) {
  return std::make_shared<cluster_launcher>(sys, std::move(nodes), std::move(where), std::move(model_dir),
                                            std::move(model_hash), 0, 1, 0);
}

std::vector<int32_t> devices_in_use(const proto::node_info& info) {
  std::vector<int32_t> out;
  out.reserve(info.workers.size());
  for (const auto& w : info.workers)
    out.push_back(w.device);
  return out;
}

std::vector<std::pair<std::string, std::string>> forwarded_environment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry{*e};
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos)
      continue;
    const std::string_view name = entry.substr(0, eq);
    const bool wanted = name.starts_with("NCCL_") || name.starts_with("GLOO_") || name.starts_with("ACTORLLM_");
    // Per-process and per-node values (a worker's token, the node's address, binary and TLS files) are the agent's.
    const bool own = name == "ACTORLLM_WORKER_TOKEN" || name == control_key_variable || name == "ACTORLLM_HOST_IP" ||
                     name == "ACTORLLM_CLUSTER_TOKEN" || name == "ACTORLLM_WORKER_BIN" ||
                     name.starts_with("ACTORLLM_TLS_");
    if (wanted && !own)
      out.emplace_back(std::string{name}, std::string{entry.substr(eq + 1)});
  }
  return out;
}

replica build_cluster_replica(caf::actor_system& sys, const engine_config& config, const replica_slot& slot) {
  if (config.cluster_address.empty())
    throw_config("the cluster executor needs cluster_address (--cluster-address HEAD:PORT)");
  replica_plan plan = plan_replica(config, slot);
  plan.r.executor = "cluster";
  const int32_t tp = config.tensor_parallel_size;
  const int32_t pp = config.pipeline_parallel_size;
  const std::string who = replica_prefix(slot.dp_rank, slot.dp_size);
  const std::string hash = model::model_content_hash(config.model);
  if (hash.empty())
    throw_config(fmt::format("{} has no config.json: nothing to serve", config.model));

  auto all = cluster_nodes(sys, config.cluster_address, cluster_token(config), std::chrono::seconds{5});
  std::vector<proto::cluster_node> nodes;
  for (auto& n : all) {
    if (!n.healthy)
      continue;
    // Agents report all their devices and the workers they run: the devices those hold (other replicas of this
    // engine, other engines) are taken. Asked afresh, as a replica started a moment ago may be missing at the head.
    auto info = fresh_info(sys, n);
    if (!info)
      continue;
    info->node_id = n.info.node_id;
    n.info = std::move(*info);
    nodes.push_back(std::move(n));
  }
  auto& claims = device_claims::instance();
  const uint64_t owner = claims.next_owner();
  auto placed = claims.place_and_claim(owner, [&] {
    std::vector<node_resources> resources;
    for (const auto& n : nodes) {
      node_resources res;
      res.node_id = n.info.node_id;
      res.address = n.info.host;
      res.n_devices = n.info.n_devices;
      res.device_kind = n.info.device_kind;
      res.free_memory_bytes = n.info.free_memory_bytes;
      res.taken_devices = devices_in_use(n.info);
      for (int32_t d : claims.taken(n.info.node_id, owner))
        res.taken_devices.push_back(d);
      resources.push_back(std::move(res));
    }
    // A stage's group (its TP group, times the copies of it under prefill context parallelism) stays on one node
    // where it can.
    return place_ranks(tp * std::max(1, config.prefill_context_parallel_size), pp, resources);
  });
  if (auto* err = std::get_if<std::string>(&placed))
    throw_config(who + *err);
  auto& where = std::get<placement>(placed);
  for (const auto& w : where.warnings)
    log::warning("executor", "{}{}", who, w);
  for (const auto& s : where.slots)
    log::debug("executor", "{}stage {} rank {} -> node '{}' device {}", who, s.stage, s.tp_rank, s.node_id, s.device);

  auto launcher = std::make_shared<cluster_launcher>(sys, std::move(nodes), std::move(where), config.model, hash,
                                                     slot.dp_rank, slot.dp_size, owner);
  const std::string registry_host = data_plane_host();
  if (!control_tls::of(sys).enabled() && !is_loopback_host(registry_host))
    log::warning("executor", "workers connect to this engine on {}: {}", registry_host,
                 describe_control_transport(registry_host, false));
  return build_worker_replica(sys, config, std::move(plan), std::move(launcher), registry_host);
}

}  // namespace actorllm::actors
