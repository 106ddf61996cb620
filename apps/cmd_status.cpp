// `actorllm status`: the nodes of a cluster as its head sees them, one line each (like `ray status`), with the
// workers each runs (data-parallel replica, stage, rank, device) under it.
#include "apps/command_registry.hpp"

#include "apps/cluster_tls_options.hpp"

#include "actorllm/proto/error.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/runtime/caf_scheduler.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace actorllm::app {
namespace {

struct status_cli {
  std::string address;
  std::string cluster_token;
  actors::control_tls tls;
};

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string{v} : std::move(fallback);
}

double gib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

/// The workers of a node under its row, one line each, by replica, stage and rank ("replica 0 stage 0 rank 1
/// device 2 (worker 1, pid 4242)"): which data-parallel replica each serves, on which device.
std::string render_workers(const proto::node_info& info) {
  auto workers = info.workers;
  std::sort(workers.begin(), workers.end(), [](const proto::worker_report& a, const proto::worker_report& b) {
    return std::tie(a.dp_rank, a.stage, a.tp_rank, a.pid) < std::tie(b.dp_rank, b.stage, b.tp_rank, b.pid);
  });
  std::string out;
  for (const auto& w : workers)
    out += fmt::format("      replica {} stage {} rank {} device {} (worker {}, pid {})\n", w.dp_rank, w.stage,
                       w.tp_rank, w.device, w.index, w.pid);
  return out;
}

/// "Replicas: 2 (replica 0: 4 workers, replica 1: 4 workers)", or "" when no node runs a worker.
std::string render_replicas(const std::vector<proto::cluster_node>& nodes) {
  std::map<int32_t, int32_t> workers_of;
  for (const auto& n : nodes)
    for (const auto& w : n.info.workers)
      ++workers_of[w.dp_rank];
  if (workers_of.empty())
    return "";
  std::string list;
  for (const auto& [replica, count] : workers_of)
    list += fmt::format("{}replica {}: {} worker{}", list.empty() ? "" : ", ", replica, count, count == 1 ? "" : "s");
  return fmt::format("Replicas: {} ({})\n", workers_of.size(), list);
}

/// The table: a header, one row per node (its workers under it), a totals line, the replicas.
std::string render_status(const std::string& address, const std::vector<proto::cluster_node>& nodes) {
  struct row {
    std::string id, host, devices, memory, workers, health, worker_lines;
  };
  std::vector<row> rows;
  rows.push_back({"NODE", "HOST", "DEVICES", "MEMORY (free / total)", "WORKERS", "HEALTH", ""});
  int32_t devices = 0;
  int32_t workers = 0;
  int32_t healthy = 0;
  uint64_t total = 0;
  uint64_t free = 0;
  for (const auto& n : nodes) {
    const auto& i = n.info;
    rows.push_back(
        {i.node_id, i.host,
         fmt::format("{} x {} ({} core{} each)", i.n_devices, i.device_kind, i.cores_per_device,
                     i.cores_per_device == 1 ? "" : "s"),
         fmt::format("{:.1f} / {:.1f} GiB", gib(i.free_memory_bytes), gib(i.total_memory_bytes)),
         std::to_string(i.n_workers),
         n.healthy ? std::string{"healthy"} : fmt::format("unhealthy (last seen {:.1f} s ago)", n.last_seen_seconds),
         render_workers(i)});
    devices += i.n_devices;
    workers += i.n_workers;
    healthy += n.healthy ? 1 : 0;
    total += i.total_memory_bytes;
    free += i.free_memory_bytes;
  }
  std::vector<size_t> width(6, 0);
  for (const auto& r : rows) {
    const std::string* cells[] = {&r.id, &r.host, &r.devices, &r.memory, &r.workers, &r.health};
    for (size_t c = 0; c < 6; ++c)
      width[c] = std::max(width[c], cells[c]->size());
  }
  std::string out = fmt::format("Cluster head {}: {} node(s), {} healthy\n", address, nodes.size(), healthy);
  for (const auto& r : rows) {
    out += fmt::format("  {:<{}}  {:<{}}  {:<{}}  {:>{}}  {:>{}}  {}\n", r.id, width[0], r.host, width[1], r.devices,
                       width[2], r.memory, width[3], r.workers, width[4], r.health);
    out += r.worker_lines;
  }
  out += fmt::format("Total: {} device(s) on {} node(s), {:.1f} / {:.1f} GiB memory free, {} worker(s)\n", devices,
                     nodes.size(), gib(free), gib(total), workers);
  out += render_replicas(nodes);
  return out;
}

int run_status(const status_cli& o) {
  const std::string address = o.address.empty() ? env_or("ACTORLLM_CLUSTER_ADDRESS", "127.0.0.1:6380") : o.address;
  const std::string token = o.cluster_token.empty() ? env_or("ACTORLLM_CLUSTER_TOKEN", "") : o.cluster_token;
  const auto colon = address.rfind(':');
  int port = 0;
  if (colon != std::string::npos && colon > 0) {
    try {
      port = std::stoi(address.substr(colon + 1));
    } catch (const std::exception&) {
      port = 0;
    }
  }
  if (port <= 0 || port > 65535) {
    fmt::print(stderr, "actorllm status: --address '{}' is not HOST:PORT\n", address);
    return 1;
  }
  const auto tls = actors::control_tls::from_environment(o.tls);
  tls.check();
  caf::actor_system_config cfg;
  proto::add_message_types(cfg);
  actors::enable_network(cfg, tls, token);
  actors::configure_caf_scheduler(cfg, 1);
  caf::actor_system sys{cfg};
  auto registry = actors::connect_control<proto::cluster_registry_actor>(sys, address.substr(0, colon),
                                                                         static_cast<uint16_t>(port));
  if (!registry) {
    fmt::print(stderr, "actorllm status: no cluster head answers at {}: {}\n", address,
               actors::describe_connect_error(sys, registry.error()));
    return 1;
  }
  int status = 1;
  caf::scoped_actor self{sys};
  self->request(*registry, std::chrono::seconds{5}, caf::get_atom::value, proto::nodes_atom::value, token)
      .receive(
          [&](std::vector<proto::cluster_node>& nodes) {
            fmt::print("{}", render_status(address, nodes));
            std::fflush(stdout);
            status = 0;
          },
          [&](caf::error& err) {
            fmt::print(stderr, "actorllm status: the cluster head at {} refused: {}{}\n", address,
                       proto::message_of(err),
                       token.empty() ? " (no token given: --cluster-token T or ACTORLLM_CLUSTER_TOKEN)" : "");
          });
  return status;
}

command_registration status_command{
    "status", "Show the nodes of a cluster: devices, memory, workers and health of each", [](CLI::App& sub) {
      auto o = std::make_shared<status_cli>();
      sub.add_option("--address", o->address,
                     "The cluster head, HOST:PORT (default: $ACTORLLM_CLUSTER_ADDRESS, else 127.0.0.1:6380)");
      sub.add_option("--cluster-token", o->cluster_token,
                     "The cluster's shared secret (default: $ACTORLLM_CLUSTER_TOKEN)");
      add_cluster_tls_options(sub, o->tls.certificate, o->tls.key, o->tls.ca_file);
      return [o]() { return run_status(*o); };
    }};

}  // namespace
}  // namespace actorllm::app
