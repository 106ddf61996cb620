// The node agent: see node_agent.hpp.
#include "actors/cluster/node_agent.hpp"

#include "actorllm/proto/error.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/cluster/gated_multiplexer.hpp"
#include "model/model_hash.hpp"
#include "util/child_process.hpp"
#include "util/log.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <csignal>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

namespace actorllm::actors {
namespace {

using reap_atom = caf::atom_constant<caf::atom("reap")>;

struct worker_entry {
  std::string token;  // the engine's worker token
  int32_t index = 0;
  int32_t dp_rank = 0;  // what the engine said the worker serves, reported back to the registry
  int32_t stage = 0;
  int32_t tp_rank = 0;
  int32_t device = 0;
  std::string registry;  // HOST:PORT of the engine's worker registry
  std::unique_ptr<util::child_process> process;
};

struct agent_state {
  node_agent_config config;
  std::vector<worker_entry> workers;
};

using agent_pointer = caf::stateful_actor<agent_state>*;

std::string node_name(const proto::node_info& info) { return fmt::format("node '{}' ({})", info.node_id, info.host); }

/// Collects ended workers, logging how each ended.
void reap(agent_pointer self) {
  auto& workers = self->state.workers;
  for (auto it = workers.begin(); it != workers.end();) {
    if (auto status = it->process->exit_status()) {
      log::info("node", "worker {} of the engine at {} (pid {}) exited with status {}", it->index, it->registry,
                it->process->pid(), *status);
      it = workers.erase(it);
    } else {
      ++it;
    }
  }
}

caf::result<int32_t> start_worker(agent_pointer self, proto::worker_launch& launch) {
  auto& st = self->state;
  const auto& info = st.config.info;
  if (launch.device < 0 || launch.device >= info.n_devices)
    return proto::make_error(errc::invalid_config,
                             fmt::format("{} has no device {}: it has {} {} device(s)", node_name(info), launch.device,
                                         info.n_devices, info.device_kind));
  // No model: a worker for `actorllm check`, which only measures communication.
  const std::string hash = launch.model_dir.empty() ? std::string{} : model::model_content_hash(launch.model_dir);
  if (!launch.model_dir.empty() && hash.empty())
    return proto::make_error(errc::invalid_config,
                             fmt::format("{} does not have the model {}", node_name(info), launch.model_dir));
  if (!launch.model_dir.empty() && hash != launch.model_hash)
    return proto::make_error(errc::invalid_config,
                             fmt::format("{} holds a different model at {} (hash {}, the engine's is {})",
                                         node_name(info), launch.model_dir, hash, launch.model_hash));
  if (launch.env_names.size() != launch.env_values.size())
    return proto::make_error(errc::internal, fmt::format("{}: {} environment names but {} values", node_name(info),
                                                         launch.env_names.size(), launch.env_values.size()));
  util::child_process::options o;
  o.program = st.config.worker_program;
  const std::string registry = fmt::format("{}:{}", launch.registry_host, launch.registry_port);
  o.args = {"worker",
            "--registry",
            registry,
            "--index",
            std::to_string(launch.index),
            "--replica",
            std::to_string(launch.dp_rank)};
  // The engine's environment first, so that this node's own address and the worker token always win.
  for (size_t i = 0; i < launch.env_names.size(); ++i)
    o.env.emplace_back(launch.env_names[i], launch.env_values[i]);
  for (const auto& entry : st.config.worker_env)
    o.env.push_back(entry);
  o.env.emplace_back("ACTORLLM_WORKER_TOKEN", launch.token);
  // The engine's control key is the cluster token, which this agent holds too (it joined with it).
  o.env.emplace_back(control_key_variable, control_key_of(self->system()));
  o.env.emplace_back(control_message_limit_variable, control_message_limit_of(self->system()));
  o.env.emplace_back("ACTORLLM_HOST_IP", info.host);
  if (info.device_kind == "cuda")
    o.env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(launch.device));
  // CPU devices need nothing here: the engine sizes each shard's kernel threads (shard_assignment::n_threads)
  // from the node's cores_per_device.
  o.die_with_parent = true;
  worker_entry w;
  w.token = launch.token;
  w.index = launch.index;
  w.dp_rank = launch.dp_rank;
  w.stage = launch.stage;
  w.tp_rank = launch.tp_rank;
  w.device = launch.device;
  w.registry = registry;
  try {
    w.process = std::make_unique<util::child_process>(o);
  } catch (const std::exception& e) {
    return proto::make_error(errc::load_failed,
                             fmt::format("{} cannot start worker {}: {}", node_name(info), launch.index, e.what()));
  }
  const auto pid = static_cast<int32_t>(w.process->pid());
  log::info("node", "started worker {} (replica {} stage {} rank {}) on {} device {} for the engine at {} (pid {})",
            launch.index, launch.dp_rank, launch.stage, launch.tp_rank, info.device_kind, launch.device, registry, pid);
  st.workers.push_back(std::move(w));
  return pid;
}

caf::behavior agent_behavior(agent_pointer self, node_agent_config config) {
  auto& st = self->state;
  st.config = std::move(config);
  st.config.info.agent_pid = static_cast<int32_t>(::getpid());
  self->send(self, reap_atom::value);
  return {
      [self](caf::get_atom, proto::nodes_atom) -> proto::node_info {
        reap(self);
        auto info = self->state.config.info;
        if (const auto mem = read_memory_info(); mem.total_bytes > 0) {
          info.total_memory_bytes = mem.total_bytes;
          info.free_memory_bytes = mem.available_bytes;
        }
        info.n_workers = static_cast<int32_t>(self->state.workers.size());
        info.workers.clear();
        for (const auto& w : self->state.workers)
          info.workers.push_back(proto::worker_report{w.index, w.dp_rank, w.stage, w.tp_rank, w.device,
                                                      static_cast<int32_t>(w.process->pid())});
        return info;
      },
      [self](proto::start_worker_atom, proto::worker_launch& launch) { return start_worker(self, launch); },
      [self](proto::stop_workers_atom, const std::string& token) -> int32_t {
        reap(self);
        auto& workers = self->state.workers;
        int32_t stopped = 0;
        for (auto it = workers.begin(); it != workers.end();) {
          if (it->token != token) {
            ++it;
            continue;
          }
          it->process->kill(SIGKILL);
          it->process->wait_for(std::chrono::seconds{1});
          log::info("node", "stopped worker {} of the engine at {} (pid {})", it->index, it->registry,
                    it->process->pid());
          ++stopped;
          it = workers.erase(it);
        }
        return stopped;
      },
      [](proto::model_hash_atom, const std::string& dir) -> std::string { return model::model_content_hash(dir); },
      [self](reap_atom) {
        reap(self);
        self->delayed_send(self, self->state.config.reap_interval, reap_atom::value);
      },
  };
}

}  // namespace

memory_info read_memory_info() {
  memory_info m;
  std::ifstream in{"/proc/meminfo"};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields{line};
    std::string key;
    uint64_t kib = 0;
    if (!(fields >> key >> kib))
      continue;
    if (key == "MemTotal:")
      m.total_bytes = kib * 1024;
    else if (key == "MemAvailable:")
      m.available_bytes = kib * 1024;
  }
  return m;
}

proto::node_agent_actor spawn_node_agent(caf::actor_system& sys, node_agent_config config) {
  return caf::actor_cast<proto::node_agent_actor>(sys.spawn(agent_behavior, std::move(config)));
}

}  // namespace actorllm::actors
