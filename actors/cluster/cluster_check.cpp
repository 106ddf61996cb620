// The cluster communication check: see cluster_check.hpp.
#include "actors/cluster/cluster_check.hpp"

#include "actorllm/error.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/executors/cluster_executor.hpp"
#include "actors/executors/mp_executor.hpp"
#include "actors/executors/worker_replica.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <utility>

namespace actorllm::actors {

namespace {

/// One transport's answers, in rank order: a worker's result, or the error of its request.
struct check_round {
  std::vector<proto::comm_check_result> results;
  std::vector<std::string> errors;
};

check_round run_round(caf::actor_system& sys, const worker_set& ws, const std::vector<rank_slot>& slots,
                      const std::string& group, const std::string& transport, const cluster_check_options& o) {
  const auto world = static_cast<int32_t>(slots.size());
  caf::scoped_actor self{sys};
  check_round round;
  round.results.resize(static_cast<size_t>(world));
  round.errors.resize(static_cast<size_t>(world));
  using handle = decltype(self->request(ws.workers[0], std::chrono::seconds{1}, proto::comm_check_atom::value,
                                        proto::comm_check_request{}));
  std::vector<handle> pending;
  for (int32_t r = 0; r < world; ++r) {
    proto::comm_check_request req;
    req.rank = r;
    req.world = world;
    req.group_name = group;
    req.large_floats = o.large_bytes / 4;
    req.iterations = o.iterations;
    req.transport = transport;
    req.device = slots[static_cast<size_t>(r)].device;
    pending.push_back(self->request(ws.workers[static_cast<size_t>(r)], std::chrono::seconds{120},
                                    proto::comm_check_atom::value, req));
  }
  // Every request is out already, so the workers measure together; the answers are collected in rank order.
  for (int32_t r = 0; r < world; ++r)
    pending[static_cast<size_t>(r)].receive(
        [&](proto::comm_check_result& res) { round.results[static_cast<size_t>(r)] = std::move(res); },
        [&](caf::error& err) { round.errors[static_cast<size_t>(r)] = sys.render(err); });
  return round;
}

/// The per-rank table, the per-pair table and the errors of one round; whether everything in it passed.
bool print_round(const check_round& round, const std::vector<rank_slot>& slots,
                 std::map<std::string, std::string>& host_of, std::ostream& out) {
  const auto world = static_cast<int32_t>(slots.size());
  auto error_of = [&](int32_t r) -> const std::string& {
    const auto i = static_cast<size_t>(r);
    return round.errors[i].empty() ? round.results[i].error : round.errors[i];
  };
  bool all_ok = true;
  out << fmt::format("\n{:<6} {:<14} {:<16} {:<10} {:<10} {:>14} {:>16}\n", "rank", "node", "address", "transport",
                     "all-reduce", "latency (us)", "bus bw (GB/s)");
  for (int32_t r = 0; r < world; ++r) {
    const auto& slot = slots[static_cast<size_t>(r)];
    const auto& res = round.results[static_cast<size_t>(r)];
    const bool ok = error_of(r).empty() && res.all_reduce_ok;
    all_ok = all_ok && ok;
    out << fmt::format("{:<6} {:<14} {:<16} {:<10} {:<10} {:>14.1f} {:>16.2f}\n", r,
                       fmt::format("{}/{}", slot.node_id, slot.device), host_of[slot.node_id],
                       res.transport.empty() ? "-" : res.transport, ok ? "ok" : "FAILED", res.all_reduce_latency_us,
                       res.all_reduce_bus_gbs);
  }
  const bool any_pairs = std::any_of(round.results.begin(), round.results.end(),
                                     [](const proto::comm_check_result& res) { return !res.pairs.empty(); });
  if (any_pairs)  // the custom all-reduce has no point-to-point transfers to measure
    out << fmt::format("\n{:<12} {:<30} {:>10} {:>14} {:>16}\n", "pair", "nodes", "verified", "latency (us)",
                       "bandwidth (GB/s)");
  for (int32_t r = 0; r < world; ++r) {
    for (const auto& p : round.results[static_cast<size_t>(r)].pairs) {
      const auto& a = slots[static_cast<size_t>(r)];
      const auto& b = slots[static_cast<size_t>(p.peer)];
      all_ok = all_ok && p.ok;
      out << fmt::format("{:<12} {:<30} {:>10} {:>14.1f} {:>16.2f}\n", fmt::format("{} <-> {}", r, p.peer),
                         fmt::format("{}/{} <-> {}/{}", a.node_id, a.device, b.node_id, b.device),
                         p.ok ? "ok" : "FAILED", p.latency_us, p.bandwidth_gbs);
    }
  }
  for (int32_t r = 0; r < world; ++r)
    if (!error_of(r).empty())
      out << fmt::format("rank {}: {}\n", r, error_of(r));
  return all_ok;
}

}  // namespace

int run_cluster_check(const cluster_check_options& o, std::ostream& out) {
  caf::actor_system_config cfg;
  proto::add_message_types(cfg);
  enable_network(cfg, o.tls, o.token);
  caf::actor_system sys{cfg};

  auto nodes = cluster_nodes(sys, o.address, o.token, std::chrono::seconds{5});
  // One slot per device of every healthy node, in node order.
  placement where;
  std::vector<proto::cluster_node> used;
  for (auto& n : nodes) {
    if (!n.healthy)
      continue;
    int32_t count = n.info.n_devices;
    if (o.max_workers_per_node > 0)
      count = std::min(count, o.max_workers_per_node);
    for (int32_t d = 0; d < count; ++d)
      where.slots.push_back({0, static_cast<int32_t>(where.slots.size()), n.info.node_id, d});
    used.push_back(n);
  }
  const auto world = static_cast<int32_t>(where.slots.size());
  if (world < 2)
    throw actorllm::error{errc::invalid_config,
                          fmt::format("the cluster at {} has {} device(s) on {} healthy node(s): a check needs at "
                                      "least 2",
                                      o.address, world, used.size())};
  const std::vector<rank_slot> slots = where.slots;
  std::map<std::string, std::string> host_of;
  for (const auto& n : used)
    host_of[n.info.node_id] = n.info.host;
  auto launcher = make_cluster_launcher(sys, used, std::move(where), "", "");
  out << fmt::format("Checking {} rank(s) on {} node(s) of the cluster at {}{}\n", world, used.size(), o.address,
                     o.tls.enabled() ? " (control plane over TLS)" : "");
  worker_set ws = launch_workers(sys, *launcher, world, data_plane_host());

  // Everyone joins one group; the requests run concurrently (each worker answers from a thread of its own). First
  // over Gloo (host memory: every cluster), then over NCCL (GPU clusters) and the custom all-reduce (the GPUs of one
  // node), each skipped with the reason where it does not apply.
  const std::string group = fmt::format("check-{}", ws.token.substr(0, 8));
  const check_round gloo = run_round(sys, ws, slots, group, "gloo", o);
  const check_round nccl = run_round(sys, ws, slots, group + "-nccl", "nccl", o);
  const check_round custom = run_round(sys, ws, slots, group + "-custom", "custom", o);
  launcher->stop_all();
  caf::anon_send_exit(ws.registry, caf::exit_reason::user_shutdown);

  bool all_ok = print_round(gloo, slots, host_of, out);
  std::string measured = "Gloo";
  // The GPU rounds: a table each, or one line saying why the transport does not apply to this cluster.
  for (const auto& [round, name] : {std::pair{&nccl, "NCCL"}, std::pair{&custom, "custom all-reduce"}}) {
    const std::string& skipped = round->results.front().skipped;
    if (round->errors.front().empty() && !skipped.empty()) {
      out << fmt::format("\n{}: skipped: {}\n", name, skipped);
      continue;
    }
    all_ok = print_round(*round, slots, host_of, out) && all_ok;
    measured += fmt::format(", {}", name);
  }
  const size_t n_pairs = static_cast<size_t>(world) * static_cast<size_t>(world - 1) / 2;
  out << fmt::format("\n{}: {} rank(s), {} pair(s), over {}\n", all_ok ? "All checks passed" : "CHECK FAILED", world,
                     n_pairs, measured);
  return all_ok ? 0 : 1;
}

}  // namespace actorllm::actors
