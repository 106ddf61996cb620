// The cluster registry: see cluster_registry.hpp.
#include "actors/cluster/cluster_registry.hpp"

#include "actorllm/proto/error.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "util/log.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <fmt/format.h>

#include <map>

namespace actorllm::actors {
namespace {

using tick_atom = caf::atom_constant<caf::atom("tick")>;
using clock = std::chrono::steady_clock;

struct node_entry {
  proto::cluster_node node;
  clock::time_point last_seen;
  bool probing = false;  // a heartbeat is in flight: send no second one
};

struct registry_state {
  std::string token;
  cluster_registry_timing timing;
  std::map<std::string, node_entry> nodes;  // by node id
};

using registry_pointer = caf::stateful_actor<registry_state>*;

std::string describe(const proto::node_info& info) {
  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  return fmt::format("node '{}' ({}, agent pid {}): {} x {} ({} core(s) each), {:.1f} GiB memory ({:.1f} GiB free)",
                     info.node_id, info.host, info.agent_pid, info.n_devices, info.device_kind, info.cores_per_device,
                     static_cast<double>(info.total_memory_bytes) / gib,
                     static_cast<double>(info.free_memory_bytes) / gib);
}

double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

void refresh_health(registry_pointer self, node_entry& e) {
  e.node.last_seen_seconds = seconds_since(e.last_seen);
  const bool healthy = clock::now() - e.last_seen < self->state.timing.unhealthy_after;
  if (healthy != e.node.healthy) {
    if (healthy)
      log::info("cluster", "node '{}' ({}) answers again: healthy", e.node.info.node_id, e.node.info.host);
    else
      log::warning("cluster", "node '{}' ({}) has not answered a heartbeat for {:.1f} s: unhealthy",
                   e.node.info.node_id, e.node.info.host, e.node.last_seen_seconds);
    e.node.healthy = healthy;
  }
}

void heartbeat(registry_pointer self) {
  for (auto& [id, e] : self->state.nodes) {
    refresh_health(self, e);
    if (e.probing)
      continue;
    e.probing = true;
    const auto agent = e.node.agent;
    auto on_reply = [self, node_id = id, agent](proto::node_info& info) {
      auto it = self->state.nodes.find(node_id);
      if (it == self->state.nodes.end() || it->second.node.agent != agent)
        return;  // the node left (or was replaced) meanwhile
      auto& entry = it->second;
      entry.probing = false;
      info.node_id = node_id;  // the id is the registry's key: an agent cannot rename itself
      entry.node.info = std::move(info);
      entry.last_seen = clock::now();
      refresh_health(self, entry);
    };
    auto on_error = [self, node_id = id, agent](caf::error& err) {
      auto it = self->state.nodes.find(node_id);
      if (it == self->state.nodes.end() || it->second.node.agent != agent)
        return;
      it->second.probing = false;
      log::debug("cluster", "heartbeat of node '{}' failed: {}", node_id, self->system().render(err));
      refresh_health(self, it->second);
    };
    self->request(agent, self->state.timing.heartbeat_timeout, caf::get_atom::value, proto::nodes_atom::value)
        .then(std::move(on_reply), std::move(on_error));
  }
}

caf::behavior registry_behavior(registry_pointer self, std::string token, cluster_registry_timing timing) {
  self->state.token = std::move(token);
  self->state.timing = timing;
  self->set_down_handler([self](caf::down_msg& down) {
    auto& nodes = self->state.nodes;
    for (auto it = nodes.begin(); it != nodes.end(); ++it) {
      if (it->second.node.agent.address() != down.source)
        continue;
      if (down.reason == caf::exit_reason::user_shutdown)
        log::info("cluster", "node '{}' ({}) left the cluster: its agent stopped; {} node(s) remain", it->first,
                  it->second.node.info.host, nodes.size() - 1);
      else
        log::warning("cluster", "node '{}' ({}) left the cluster: its agent is gone ({}); {} node(s) remain", it->first,
                     it->second.node.info.host, self->system().render(down.reason), nodes.size() - 1);
      nodes.erase(it);
      return;
    }
  });
  self->send(self, tick_atom::value);
  return {
      [self](proto::join_atom, proto::node_join& join) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        const auto& info = join.info;
        if (join.token != st.token) {
          log::warning("cluster", "refused node '{}' ({}, agent pid {}): wrong cluster token", info.node_id, info.host,
                       info.agent_pid);
          return proto::make_error(
              errc::invalid_config,
              fmt::format("wrong cluster token: the head refused node '{}' ({})", info.node_id, info.host));
        }
        if (info.node_id.empty())
          return proto::make_error(errc::invalid_config,
                                   fmt::format("a node on {} joined without a node id", info.host));
        if (!join.agent)
          return proto::make_error(errc::invalid_config,
                                   fmt::format("node '{}' ({}) joined without its agent", info.node_id, info.host));
        bool monitored = false;  // the same agent joining again
        if (auto it = st.nodes.find(info.node_id); it != st.nodes.end()) {
          refresh_health(self, it->second);
          monitored = it->second.node.agent == join.agent;
          auto& old = it->second.node;
          if (old.agent != join.agent && !old.healthy) {
            // The old agent stopped answering (and its connection may not have timed out yet): the node restarted.
            log::warning("cluster", "node '{}' rejoins from {} (agent pid {}); its old agent (pid {}) is silent",
                         info.node_id, info.host, info.agent_pid, old.info.agent_pid);
            self->demonitor(old.agent.address());
          } else if (old.agent != join.agent) {
            log::warning("cluster", "refused node '{}' ({}, agent pid {}): the id is taken by the agent on {} (pid {})",
                         info.node_id, info.host, info.agent_pid, old.info.host, old.info.agent_pid);
            return proto::make_error(
                errc::invalid_config,
                fmt::format("node id '{}' is already taken by the agent on {} (pid {}): pick another --node-id",
                            info.node_id, old.info.host, old.info.agent_pid));
          }
        }
        node_entry e;
        e.node.info = info;
        e.node.agent = join.agent;
        e.node.healthy = true;
        e.last_seen = clock::now();
        if (!monitored)
          self->monitor(join.agent);
        st.nodes.insert_or_assign(info.node_id, std::move(e));
        log::info("cluster", "{} joined the cluster; {} node(s)", describe(info), st.nodes.size());
        return caf::ok_atom::value;
      },
      [self](caf::get_atom, proto::nodes_atom,
             const std::string& presented) -> caf::result<std::vector<proto::cluster_node>> {
        auto& st = self->state;
        if (presented != st.token) {
          log::warning("cluster", "refused a request for the nodes: wrong cluster token");
          return proto::make_error(errc::invalid_config, "wrong cluster token");
        }
        std::vector<proto::cluster_node> out;
        out.reserve(st.nodes.size());
        for (auto& [id, e] : st.nodes) {
          refresh_health(self, e);
          out.push_back(e.node);
        }
        return out;
      },
      [self](tick_atom) {
        heartbeat(self);
        self->delayed_send(self, self->state.timing.heartbeat_interval, tick_atom::value);
      },
  };
}

}  // namespace

proto::cluster_registry_actor spawn_cluster_registry(caf::actor_system& sys, std::string token,
                                                     cluster_registry_timing timing) {
  return caf::actor_cast<proto::cluster_registry_actor>(sys.spawn(registry_behavior, std::move(token), timing));
}

}  // namespace actorllm::actors
