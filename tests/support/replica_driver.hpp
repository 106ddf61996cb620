// Data-parallel replicas built straight through actors::build_replica (what the engine's replica set does), each
// driven by a request of its own: the executors' share of one engine, tested without the replica set above them.
// Header-only; the e2e_mp and e2e_cluster suites use it.
#pragma once

#include "actorllm/proto/error.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/executors/executor.hpp"
#include "support/golden_ids.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace actorllm::test {

/// An actor system set up like an engine's with workers (network on, control key), holding the replicas built in
/// it; they are stopped (their workers with them) before the system goes.
class replica_driver {
 public:
  /// `control_key`: the cluster token for the cluster executor; empty: a fresh key (mp).
  explicit replica_driver(const std::string& control_key = "") {
    proto::add_message_types(cfg_);
    cfg_.set("scheduler.max-threads", 2);
    actors::enable_network(cfg_, actors::control_tls{}, control_key.empty() ? actors::new_control_key() : control_key);
    sys_ = std::make_unique<caf::actor_system>(cfg_);
  }

  ~replica_driver() {
    for (auto& r : replicas_)
      actors::stop_replica(*sys_, r);
    replicas_.clear();
    sys_.reset();
  }
  replica_driver(const replica_driver&) = delete;
  replica_driver& operator=(const replica_driver&) = delete;

  /// Builds replica `slot` of `config` (config.distributed_executor_backend already resolved); it is replica number
  /// size() - 1 of this driver afterwards.
  actors::replica& build(const engine_config& config, actors::replica_slot slot) {
    replicas_.push_back(actors::build_replica(*sys_, config, slot));
    return replicas_.back();
  }

  /// Stops replica `i` (its workers too), as the replica set does before restarting it.
  void stop(size_t i) {
    actors::stop_replica(*sys_, replicas_.at(i));
    replicas_.at(i) = actors::replica{};
  }

  actors::replica& at(size_t i) { return replicas_.at(i); }

  /// Replica `i`'s greedy output for g.prompt, as long as g.output (EOS ignored); the failure's message on error.
  std::vector<int32_t> greedy_ids(size_t i, const golden_case& g) {
    caf::scoped_actor self{*sys_};
    proto::submit_request req;
    req.request_id = ++next_id_;
    req.prompt_is_tokens = true;
    req.prompt_ids = g.prompt;
    req.params.temperature = 0;
    req.params.max_tokens = static_cast<int32_t>(g.output.size());
    req.params.ignore_eos = true;
    req.sink = caf::actor_cast<proto::output_sink>(self);
    caf::anon_send(replicas_.at(i).engine, std::move(req));
    std::vector<int32_t> out;
    std::string failure;
    bool done = false;
    while (!done && failure.empty()) {
      bool timed_out = false;
      self->receive(
          [&](proto::output_batch& batch) {
            for (auto& f : batch.failures)
              failure = f.message;
            for (auto& o : batch.outputs)
              if (o.finished && !o.outputs.empty()) {
                out = o.outputs.front().token_ids;
                done = true;
              }
          },
          caf::after(std::chrono::seconds{120}) >> [&] { timed_out = true; });
      REQUIRE_MESSAGE(!timed_out, "replica " << i << " gave no output within 120 s");
    }
    REQUIRE_MESSAGE(failure.empty(), "replica " << i << " failed the request: " << failure);
    return out;
  }

 private:
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::deque<actors::replica> replicas_;  // a deque: build() keeps references to the others valid
  uint64_t next_id_ = 0;
};

}  // namespace actorllm::test
