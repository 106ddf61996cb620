// The cluster registry in one process, with stand-in agents: token checks, node id uniqueness, a silent agent
// marked unhealthy (and healthy again), a dead agent removed, and its node id free again afterwards.
#include "actors/cluster/cluster_registry.hpp"
#include "actorllm/proto/error.hpp"
#include "actorllm/proto/type_ids.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

struct registry_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  proto::cluster_registry_actor registry;
  const std::string token = "secret";

  registry_fixture() {
    proto::add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    actors::cluster_registry_timing timing;
    timing.heartbeat_interval = 50ms;
    timing.heartbeat_timeout = 100ms;
    timing.unhealthy_after = 300ms;
    registry = actors::spawn_cluster_registry(*sys, token, timing);
  }
  ~registry_fixture() { caf::anon_send_exit(registry, caf::exit_reason::user_shutdown); }

  /// A stand-in agent that answers heartbeats while `answering` is true.
  proto::node_agent_actor fake_agent(const std::string& node_id, std::shared_ptr<std::atomic<bool>> answering) {
    auto agent = sys->spawn([node_id, answering](caf::event_based_actor* self) -> caf::behavior {
      return {
          [=](caf::get_atom, proto::nodes_atom) -> caf::result<proto::node_info> {
            if (!answering->load())
              return self->make_response_promise<proto::node_info>();  // never delivered
            proto::node_info info;
            info.node_id = node_id;
            info.host = "10.0.0.1";
            info.n_devices = 1;
            return info;
          },
      };
    });
    return caf::actor_cast<proto::node_agent_actor>(agent);
  }

  caf::expected<caf::ok_atom> join(const std::string& node_id, const proto::node_agent_actor& agent,
                                   const std::string& presented) {
    proto::node_join j;
    j.token = presented;
    j.info.node_id = node_id;
    j.info.host = "10.0.0.1";
    j.info.device_kind = "cpu";
    j.info.n_devices = 1;
    j.agent = agent;
    caf::expected<caf::ok_atom> result{caf::error{}};
    caf::scoped_actor self{*sys};
    self->request(registry, 5s, proto::join_atom::value, j)
        .receive([&](caf::ok_atom ok) { result = ok; }, [&](caf::error& err) { result = std::move(err); });
    return result;
  }

  caf::expected<std::vector<proto::cluster_node>> nodes(const std::string& presented) {
    caf::expected<std::vector<proto::cluster_node>> result{caf::error{}};
    caf::scoped_actor self{*sys};
    self->request(registry, 5s, caf::get_atom::value, proto::nodes_atom::value, presented)
        .receive([&](std::vector<proto::cluster_node>& n) { result = std::move(n); },
                 [&](caf::error& err) { result = std::move(err); });
    return result;
  }

  /// Polls the node list until `done` holds for it; false after 5 s.
  bool wait_until(const std::function<bool(const std::vector<proto::cluster_node>&)>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto n = nodes(token);
      if (n && done(*n))
        return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
};

}  // namespace

TEST_CASE_FIXTURE(registry_fixture, "the registry checks the token first, then the node id") {
  auto answering = std::make_shared<std::atomic<bool>>(true);
  auto a = fake_agent("a", answering);
  auto wrong = join("a", a, "not-the-secret");
  REQUIRE(!wrong);
  CHECK(proto::message_of(wrong.error()).find("wrong cluster token") != std::string::npos);
  CHECK(join("a", a, token));
  CHECK(join("a", a, token));  // the same agent again: harmless

  auto b = fake_agent("a", answering);
  auto taken = join("a", b, token);
  REQUIRE(!taken);
  CHECK(proto::message_of(taken.error()).find("already taken") != std::string::npos);

  auto refused = nodes("not-the-secret");
  REQUIRE(!refused);
  CHECK(proto::message_of(refused.error()) == "wrong cluster token");
  auto listed = nodes(token);
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK(listed->front().info.node_id == "a");
  CHECK(listed->front().agent == a);
  caf::anon_send_exit(a, caf::exit_reason::kill);
  caf::anon_send_exit(b, caf::exit_reason::kill);
}

TEST_CASE_FIXTURE(registry_fixture, "a silent agent is marked unhealthy, a dead one is removed and its id freed") {
  auto answering = std::make_shared<std::atomic<bool>>(true);
  auto a = fake_agent("a", answering);
  REQUIRE(join("a", a, token));
  CHECK(wait_until([](const auto& n) { return n.size() == 1 && n[0].healthy && n[0].last_seen_seconds < 0.2; }));

  answering->store(false);
  CHECK(wait_until([](const auto& n) { return n.size() == 1 && !n[0].healthy && n[0].last_seen_seconds >= 0.3; }));
  answering->store(true);
  CHECK(wait_until([](const auto& n) { return n.size() == 1 && n[0].healthy; }));

  caf::anon_send_exit(a, caf::exit_reason::kill);
  CHECK(wait_until([](const auto& n) { return n.empty(); }));
  auto b = fake_agent("a", answering);
  CHECK(join("a", b, token));  // the old agent is gone: the id is free
  caf::anon_send_exit(b, caf::exit_reason::kill);
}
