// `actorllm node`: a node of a cluster (DESIGN.md §5). `--head` runs the cluster registry (and, unless
// --cpu-devices 0, an agent for this machine); `--join HEAD:PORT` runs an agent that joins a head's registry and
// starts workers for engines on request. Both serve until SIGINT/SIGTERM; a joined node also ends when the head
// is gone (exit status 3), killing its workers.
#include "apps/command_registry.hpp"

#include "apps/cluster_tls_options.hpp"

#include "actorllm/error.hpp"
#include "actorllm/proto/error.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "actors/cluster/cluster_registry.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/cluster/gated_multiplexer.hpp"
#include "actors/cluster/node_agent.hpp"
#include "actors/executors/mp_executor.hpp"
#include "actors/runtime/caf_scheduler.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace actorllm::app {
namespace {

struct node_cli {
  bool head = false;
  std::string join;  ///< HEAD:PORT
  std::string host;
  uint16_t port = 6380;
  int32_t cpu_devices = 1;
  std::string node_id;
  std::string cluster_token;
  actors::control_tls tls;
  bool insecure = false;  ///< a plaintext head beyond loopback, knowingly
  uint64_t max_control_message_bytes = 256u << 20;
};

volatile std::sig_atomic_t stop_signal = 0;

extern "C" void on_stop_signal(int sig) { stop_signal = sig; }

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string{v} : std::move(fallback);
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

std::pair<std::string, uint16_t> parse_address(const std::string& address, const std::string& option) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw std::invalid_argument(fmt::format("{}: '{}' is not HOST:PORT", option, address));
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format("{}: '{}' is not HOST:PORT", option, address));
  }
  if (port <= 0 || port > 65535)
    throw std::invalid_argument(fmt::format("{}: port {} is outside [1, 65535]", option, port));
  return {address.substr(0, colon), static_cast<uint16_t>(port)};
}

proto::node_info this_node(const node_cli& o, const std::string& host) {
  proto::node_info info;
  info.node_id = o.node_id.empty() ? host_name() : o.node_id;
  info.host = host;
  info.device_kind = "cpu";
  info.n_devices = o.cpu_devices;
  const auto cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  info.cores_per_device = std::max(1, cores / std::max(1, o.cpu_devices));
  const auto mem = actors::read_memory_info();
  info.total_memory_bytes = mem.total_bytes;
  info.free_memory_bytes = mem.available_bytes;
  info.agent_pid = static_cast<int32_t>(::getpid());
  return info;
}

int run_node(const node_cli& o) {
  if (o.head == !o.join.empty())
    throw std::invalid_argument("give exactly one of --head and --join HEAD:PORT");
  if (o.insecure && !o.head)
    throw std::invalid_argument("--insecure is for --head (a joining node listens on no control port)");
  if (o.cpu_devices < 0)
    throw std::invalid_argument(fmt::format("--cpu-devices {} is negative", o.cpu_devices));
  if (!o.head && o.cpu_devices == 0)
    throw std::invalid_argument(
        "--cpu-devices 0 is for a head that only runs the registry; a joining node needs "
        "at least one device");
  const std::string host = o.host.empty() ? env_or("ACTORLLM_HOST_IP", "127.0.0.1") : o.host;
  std::string token = o.cluster_token.empty() ? env_or("ACTORLLM_CLUSTER_TOKEN", "") : o.cluster_token;
  const bool generated_token = token.empty() && o.head;
  if (token.empty() && !o.head)
    throw std::invalid_argument(
        "--join needs the cluster token: --cluster-token T or ACTORLLM_CLUSTER_TOKEN (the "
        "head prints it when it starts)");
  if (generated_token)
    token = actors::new_control_key();  // 256 random bits from OpenSSL

  const auto tls = actors::control_tls::from_environment(o.tls);
  tls.check();
  if (o.head && !tls.enabled() && !actors::is_loopback_host(host) && !o.insecure)
    throw std::invalid_argument(fmt::format(
        "refusing to run the cluster head on {} in plaintext: beyond loopback the control plane needs TLS "
        "(--cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca, or $ACTORLLM_TLS_*), so that only nodes "
        "holding a certificate of the cluster's CA can send it a byte and no one on the way can read or alter the "
        "traffic. To run it anyway with only the cluster token for authentication, add --insecure",
        host));

  // Handlers, not blocked signals: the worker processes this node starts must not inherit a blocked SIGTERM.
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  caf::actor_system_config cfg;
  proto::add_message_types(cfg);
  actors::enable_network(cfg, tls, token, o.max_control_message_bytes);
  actors::configure_caf_scheduler(cfg, 2);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};

  proto::cluster_registry_actor registry;
  std::string head_address;
  if (o.head) {
    registry = actors::spawn_cluster_registry(sys, token);
    auto port = actors::publish_control(registry, o.port, host);
    if (!port) {
      log::error("node", "cannot listen on {}:{}: {}", host, o.port, sys.render(port.error()));
      caf::anon_send_exit(registry, caf::exit_reason::user_shutdown);
      return 1;
    }
    head_address = fmt::format("{}:{}", host, *port);
    log::info("node", "Cluster head listening on {}{}", head_address, tls.enabled() ? " (TLS)" : "");
    if (!tls.enabled() && !actors::is_loopback_host(host))
      log::warning("node", "{}", actors::describe_control_transport(host, false));
    else
      log::info("node", "{}", actors::describe_control_transport(host, tls.enabled()));
    if (generated_token)
      log::info("node",
                "No cluster token was given; generated one. Join with: ACTORLLM_CLUSTER_TOKEN={} actorllm "
                "node --join {}",
                token, head_address);
  } else {
    const auto [head_host, head_port] = parse_address(o.join, "--join");
    head_address = o.join;
    // The head may still be coming up: retry for a few seconds.
    // A broken handshake says the most (TLS on one side only, another CA): report it even when a later try
    // failed otherwise (a busy head may also time a try out).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    caf::error telling;
    for (;;) {
      auto remote = actors::connect_control<proto::cluster_registry_actor>(sys, head_host, head_port);
      if (remote) {
        registry = *remote;
        break;
      }
      if (!telling || remote.error() == caf::sec::disconnect_during_handshake ||
          actors::refused_at_gate(remote.error()))
        telling = remote.error();
      if (actors::refused_at_gate(remote.error()) || std::chrono::steady_clock::now() > deadline || stop_signal != 0) {
        log::error("node", "cannot reach the cluster head at {}: {}", head_address,
                   actors::describe_connect_error(sys, telling));
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{200});
    }
    self->monitor(registry);
  }

  proto::node_agent_actor agent;
  if (o.cpu_devices > 0) {
    actors::node_agent_config agent_config;
    agent_config.info = this_node(o, host);
    agent_config.worker_program = actors::worker_binary();
    agent_config.worker_env = tls.environment();
    agent = actors::spawn_node_agent(sys, agent_config);
    bool joined = false;
    self->request(registry, std::chrono::seconds{10}, proto::join_atom::value,
                  proto::node_join{token, agent_config.info, agent})
        .receive([&](caf::ok_atom) { joined = true; },
                 [&](caf::error& err) {
                   log::error("node", "the cluster head at {} refused node '{}': {}", head_address,
                              agent_config.info.node_id, proto::message_of(err));
                 });
    if (!joined) {
      caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
      if (o.head)
        caf::anon_send_exit(registry, caf::exit_reason::user_shutdown);
      return 1;
    }
    log::info("node", "node '{}' joined the cluster at {} with {} cpu device(s) of {} core(s) each",
              agent_config.info.node_id, head_address, agent_config.info.n_devices, agent_config.info.cores_per_device);
  }

  int status = 0;
  for (;;) {
    bool head_gone = false;
    self->receive([&](caf::down_msg&) { head_gone = true; }, caf::after(std::chrono::milliseconds{200}) >> [] {});
    if (head_gone) {
      log::error("node", "the cluster head at {} is gone; stopping this node's workers and exiting", head_address);
      status = 3;
      break;
    }
    if (stop_signal != 0) {
      log::info("node", "signal {}: shutting down this node", static_cast<int>(stop_signal));
      break;
    }
  }
  if (agent)
    caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  if (o.head)
    caf::anon_send_exit(registry, caf::exit_reason::user_shutdown);
  return status;
}

command_registration node_command{
    "node", "Run a node of a cluster: the head (--head) or a node that joins one (--join HEAD:PORT)",
    [](CLI::App& sub) {
      auto o = std::make_shared<node_cli>();
      sub.footer(
          "The cluster token comes from --cluster-token or $ACTORLLM_CLUSTER_TOKEN; a head started without one "
          "generates one and logs the command line to join it. Every node's address comes from --host, else "
          "$ACTORLLM_HOST_IP, else 127.0.0.1.\n");
      auto* head = sub.add_flag("--head", o->head, "Run the cluster head (the registry nodes join)");
      auto* join = sub.add_option("--join", o->join, "Join the cluster whose head listens on HEAD:PORT");
      head->excludes(join);
      sub.add_option("--host", o->host, "This node's address (default: $ACTORLLM_HOST_IP, else 127.0.0.1)");
      sub.add_option("--port", o->port, "The head's port (0: any free one)")->capture_default_str();
      sub.add_option("--cpu-devices", o->cpu_devices,
                     "How many CPU devices to split this machine's cores into (0 with --head: registry only)")
          ->capture_default_str();
      sub.add_option("--node-id", o->node_id, "This node's id in the cluster (default: the host name)");
      sub.add_option("--cluster-token", o->cluster_token, "The cluster's shared secret");
      add_cluster_tls_options(sub, o->tls.certificate, o->tls.key, o->tls.ca_file);
      add_control_message_limit_option(sub, o->max_control_message_bytes);
      sub.add_flag("--insecure", o->insecure,
                   "With --head on an address beyond loopback: run without TLS (peers still prove the cluster "
                   "token before any message is read, but traffic is not encrypted or protected from tampering)");
      return [o]() { return run_node(*o); };
    }};

}  // namespace
}  // namespace actorllm::app
