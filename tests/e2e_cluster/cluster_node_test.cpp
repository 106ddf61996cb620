// The node side of a cluster, simulated on loopback: `actorllm node --head` / `--join` processes, `actorllm
// status`, token checks, a killed agent leaving the cluster, and an agent starting and stopping a worker for an
// engine (here the test process, with a worker registry of its own).
#include "cluster_harness.hpp"

#include "actorllm/proto/error.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/cluster/worker_registry.hpp"
#include "model/model_hash.hpp"
#include "support/test_paths.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// The status line of one node ("  node-0  127.0.0.1  2 x cpu ..."), or "" when it is not listed.
std::string node_line(const std::string& status, const std::string& node_id) {
  std::istringstream in{status};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words{line};
    std::string first;
    words >> first;
    if (first == node_id)
      return line;
  }
  return "";
}

/// A CAF client in the test process: an engine's view of the cluster.
struct cluster_client {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;

  explicit cluster_client(const test::sim_cluster& cluster) {
    proto::add_message_types(cfg);
    actors::enable_network(cfg, {}, cluster.token());
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  std::vector<proto::cluster_node> nodes(const test::sim_cluster& cluster) {
    auto registry = sys->middleman().remote_actor<proto::cluster_registry_actor>("127.0.0.1", cluster.head_port());
    REQUIRE_MESSAGE(registry, sys->render(registry.error()));
    std::vector<proto::cluster_node> out;
    caf::scoped_actor self{*sys};
    self->request(*registry, 5s, caf::get_atom::value, proto::nodes_atom::value, cluster.token())
        .receive([&](std::vector<proto::cluster_node>& n) { out = std::move(n); },
                 [&](caf::error& err) { FAIL("get nodes failed: " << sys->render(err)); });
    return out;
  }

  template <class T, class... Ts>
  caf::expected<T> ask(const proto::node_agent_actor& agent, Ts&&... xs) {
    caf::expected<T> result{caf::error{}};
    caf::scoped_actor self{*sys};
    self->request(agent, 10s, std::forward<Ts>(xs)...)
        .receive([&](T& x) { result = std::move(x); }, [&](caf::error& err) { result = std::move(err); });
    return result;
  }
};

/// Whether `pid` runs (a zombie does not: an orphan may wait for a reaper that never comes in a container).
bool process_alive(int32_t pid) {
  std::ifstream stat{fmt::format("/proc/{}/stat", pid)};
  std::string text;
  if (!std::getline(stat, text))
    return false;
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

/// A stand-in for an engine: a worker registry published on loopback, reporting each admitted worker to `listener`.
struct fake_engine {
  proto::worker_registry_actor registry;
  uint16_t port = 0;

  fake_engine(caf::actor_system& sys, const caf::scoped_actor& listener, const std::string& token) {
    registry = actors::spawn_worker_registry(sys, {token, 1, caf::actor_cast<caf::actor>(listener)});
    auto published = sys.middleman().publish(registry, 0, "127.0.0.1", true);
    REQUIRE_MESSAGE(published, sys.render(published.error()));
    port = *published;
  }
  ~fake_engine() { caf::anon_send_exit(registry, caf::exit_reason::user_shutdown); }
};

/// Waits up to 10 s for a worker_hello; its pid, or 0.
int32_t await_hello(const caf::scoped_actor& listener) {
  int32_t pid = 0;
  listener->receive([&](proto::worker_hello& h) { pid = h.pid; }, caf::after(10s) >> [] {});
  return pid;
}

proto::worker_launch launch_for(const std::string& model_dir, const std::string& hash) {
  proto::worker_launch l;
  l.registry_host = "127.0.0.1";
  l.registry_port = 1;  // unused: these launches are refused before a worker starts
  l.index = 0;
  l.token = "engine-token";
  l.device = 0;
  l.model_dir = model_dir;
  l.model_hash = hash;
  return l;
}

}  // namespace

/// A token strong enough to be accepted at start (cluster_token.hpp) that is not the cluster's.
const std::string strong_wrong_token = "0123456789abcdef0123456789abcdef";

TEST_CASE("two simulated nodes with two cpu devices each join the head and show in `actorllm status`") {
  test::sim_cluster cluster{2, 2};
  const auto status = cluster.status();
  INFO(status.out);
  REQUIRE(status.status == 0);
  CHECK(contains(status.out, cluster.head_address()));
  CHECK(contains(status.out, "2 node(s), 2 healthy"));
  for (const char* id : {"node-0", "node-1"}) {
    const std::string line = node_line(status.out, id);
    CHECK(contains(line, "127.0.0.1"));
    CHECK(contains(line, "2 x cpu"));
    CHECK(contains(line, "healthy"));
    CHECK(!contains(line, "unhealthy"));
  }
  CHECK(contains(status.out, "Total: 4 device(s) on 2 node(s)"));

  SUBCASE("a wrong token gets no node list") {
    const auto refused = cluster.status(strong_wrong_token);
    CHECK(refused.status == 1);
    CHECK(contains(refused.out, "wrong cluster token"));
  }
}

TEST_CASE("an agent with a wrong token is refused and not listed") {
  test::sim_cluster cluster{1, 1};
  auto& intruder = cluster.start_agent("intruder", 1, strong_wrong_token);
  const auto status = intruder.wait_for(5s);
  REQUIRE_MESSAGE(status.has_value(), "the refused agent still runs; its log:\n" << intruder.log_text());
  CHECK(*status != 0);
  CHECK(contains(intruder.log_text(), "wrong cluster token"));
  // Refused at the control gate, before the head read a message of it (so it never learnt the node's name).
  CHECK(contains(cluster.head().log_text(), "refused a control-plane connection"));
  const auto listed = cluster.status();
  CHECK(contains(listed.out, "1 node(s)"));
  CHECK(node_line(listed.out, "intruder").empty());
}

TEST_CASE("a node id already taken is refused") {
  test::sim_cluster cluster{1, 1};
  auto& twin = cluster.start_agent("node-0", 1, cluster.token());
  const auto status = twin.wait_for(5s);
  REQUIRE_MESSAGE(status.has_value(), "the second node-0 still runs; its log:\n" << twin.log_text());
  CHECK(*status == 1);
  CHECK(contains(twin.log_text(), "already taken"));
  CHECK(cluster.node_count() == 1u);
}

TEST_CASE("an agent killed with SIGKILL leaves the head's list within 5 s") {
  test::sim_cluster cluster{2, 1};
  cluster.process("node-1").kill(SIGKILL);
  CHECK(cluster.wait_for_nodes(1, 5s));
  const auto status = cluster.status();
  CHECK(!node_line(status.out, "node-0").empty());
  CHECK(node_line(status.out, "node-1").empty());
  CHECK(contains(cluster.head().log_text(), "node 'node-1' (127.0.0.1) left the cluster"));
}

TEST_CASE("agents exit with status 3 when the head is gone") {
  test::sim_cluster cluster{1, 1};
  cluster.head().kill(SIGKILL);
  auto& agent = cluster.process("node-0");
  const auto status = agent.wait_for(10s);
  REQUIRE_MESSAGE(status.has_value(), "the agent outlived its head; its log:\n" << agent.log_text());
  CHECK(*status == 3);
  CHECK(contains(agent.log_text(), "is gone"));
}

TEST_CASE("an agent checks the model and names itself when it refuses a worker") {
  test::sim_cluster cluster{1, 2};
  cluster_client client{cluster};
  const auto nodes = client.nodes(cluster);
  REQUIRE(nodes.size() == 1);
  const auto& node = nodes.front();
  CHECK(node.info.node_id == "node-0");
  CHECK(node.info.n_devices == 2);
  CHECK(node.info.device_kind == "cpu");
  CHECK(node.info.cores_per_device >= 1);
  CHECK(node.info.total_memory_bytes > 0);
  CHECK(node.healthy);

  const std::string model = test::model_dir("stories260K").string();
  const std::string local_hash = model::model_content_hash(model);
  REQUIRE(!local_hash.empty());
  auto remote_hash = client.ask<std::string>(node.agent, proto::model_hash_atom::value, model);
  REQUIRE(remote_hash);
  CHECK(*remote_hash == local_hash);
  auto missing_hash = client.ask<std::string>(node.agent, proto::model_hash_atom::value, std::string{"/no/such/model"});
  REQUIRE(missing_hash);
  CHECK(missing_hash->empty());

  auto wrong = client.ask<int32_t>(node.agent, proto::start_worker_atom::value, launch_for(model, "0123456789abcdef"));
  REQUIRE(!wrong);
  const std::string wrong_message = proto::message_of(wrong.error());
  CHECK(contains(wrong_message, "node 'node-0' (127.0.0.1) holds a different model at " + model));
  CHECK(contains(wrong_message, local_hash));

  auto missing =
      client.ask<int32_t>(node.agent, proto::start_worker_atom::value, launch_for("/no/such/model", local_hash));
  REQUIRE(!missing);
  CHECK(
      contains(proto::message_of(missing.error()), "node 'node-0' (127.0.0.1) does not have the model /no/such/model"));

  auto launch = launch_for(model, local_hash);
  launch.device = 2;
  auto no_device = client.ask<int32_t>(node.agent, proto::start_worker_atom::value, launch);
  REQUIRE(!no_device);
  CHECK(contains(proto::message_of(no_device.error()), "node 'node-0' (127.0.0.1) has no device 2"));
}

TEST_CASE("an agent starts a worker that registers with the engine, and stops it") {
  test::sim_cluster cluster{1, 1};
  cluster_client client{cluster};
  const auto nodes = client.nodes(cluster);
  REQUIRE(nodes.size() == 1);
  const auto agent = nodes.front().agent;

  caf::scoped_actor listener{*client.sys};
  const std::string worker_token = "engine-token-e2e";
  fake_engine engine{*client.sys, listener, worker_token};

  const std::string model = test::model_dir("stories260K").string();
  auto launch = launch_for(model, model::model_content_hash(model));
  launch.registry_port = engine.port;
  launch.token = worker_token;
  launch.env_names = {"ACTORLLM_LOG_LEVEL"};
  launch.env_values = {"info"};
  auto pid = client.ask<int32_t>(agent, proto::start_worker_atom::value, launch);
  REQUIRE_MESSAGE(pid, client.sys->render(pid.error()));
  CHECK(*pid > 0);

  REQUIRE_MESSAGE(await_hello(listener) == *pid, "no worker_hello within 10 s; the agent's log:\n"
                                                     << cluster.process("node-0").log_text());

  auto info = client.ask<proto::node_info>(agent, caf::get_atom::value, proto::nodes_atom::value);
  REQUIRE(info);
  CHECK(info->n_workers == 1);

  auto other = client.ask<int32_t>(agent, proto::stop_workers_atom::value, std::string{"another-engine"});
  REQUIRE(other);
  CHECK(*other == 0);
  auto stopped = client.ask<int32_t>(agent, proto::stop_workers_atom::value, worker_token);
  REQUIRE(stopped);
  CHECK(*stopped == 1);
  CHECK(::kill(static_cast<pid_t>(*pid), 0) != 0);  // killed and reaped
  info = client.ask<proto::node_info>(agent, caf::get_atom::value, proto::nodes_atom::value);
  REQUIRE(info);
  CHECK(info->n_workers == 0);
}

TEST_CASE("a node's workers end with its agent") {
  test::sim_cluster cluster{1, 1};
  cluster_client client{cluster};
  const auto nodes = client.nodes(cluster);
  REQUIRE(nodes.size() == 1);
  caf::scoped_actor listener{*client.sys};
  fake_engine engine{*client.sys, listener, "engine-token-end"};
  const std::string model = test::model_dir("stories260K").string();
  auto launch = launch_for(model, model::model_content_hash(model));
  launch.registry_port = engine.port;
  launch.token = "engine-token-end";
  auto pid = client.ask<int32_t>(nodes.front().agent, proto::start_worker_atom::value, launch);
  REQUIRE_MESSAGE(pid, client.sys->render(pid.error()));
  REQUIRE(await_hello(listener) == *pid);
  CHECK(process_alive(*pid));

  int signal = SIGTERM;
  SUBCASE("the agent stops (SIGTERM)") { signal = SIGTERM; }
  SUBCASE("the agent is killed (SIGKILL)") { signal = SIGKILL; }
  auto& agent = cluster.process("node-0");
  agent.kill(signal);
  REQUIRE(agent.wait_for(5s));
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (process_alive(*pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  CHECK_MESSAGE(!process_alive(*pid), "worker pid " << *pid << " outlived its agent (signal " << signal << ")");
}
