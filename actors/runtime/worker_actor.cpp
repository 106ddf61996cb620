// The worker root actor: it hosts shards (their collectives and links from comm/group_transports) and runs its rank
// of each `actorllm check` round (comm/check).
#include "actors/runtime/worker_actor.hpp"

#include "actorllm/proto/error.hpp"
#include "actors/executors/mp_executor.hpp"
#include "actors/runtime/shard_actor.hpp"
#include "comm/check/check_round.hpp"
#include "comm/comm_error.hpp"
#include "comm/gloo_group.hpp"
#include "comm/group_transports.hpp"
#include "comm/rendezvous_store.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <vector>

namespace actorllm::actors {
namespace {

/// A rendezvous store in the engine (its registry, or a lockstep set's expert store): blocking requests from the
/// shard's own thread (it runs in a detached actor, so blocking there stalls nobody else).
class registry_store final : public comm::rendezvous_store {
 public:
  registry_store(caf::actor_system& sys, proto::rendezvous_store_actor registry)
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
  proto::rendezvous_store_actor registry_;
};

using check_actor = caf::typed_actor<
    caf::replies_to<proto::comm_check_atom, proto::comm_check_request>::with<proto::comm_check_result>>;

check_actor::behavior_type check_behavior(check_actor::pointer self, proto::worker_registry_actor registry) {
  return {
      [self, registry](proto::comm_check_atom, proto::comm_check_request& req) {
        registry_store store{self->system(), registry};
        proto::comm_check_result out = comm::run_check_round(store, req, data_plane_host());
        self->quit();
        return out;
      },
  };
}

}  // namespace

shard_args make_worker_shard_args(caf::actor_system& sys, const proto::shard_assignment& a,
                                  proto::worker_registry_actor registry) {
  shard_args args = shard_args_of(a);
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
      return comm::make_group_collective(*store, fmt::format("{}/tp/{}", prefix, stage), rank, size, be, options,
                                         stage);
    };
  }
  // Lockstep expert parallelism: the EP group over every replica's TP ranks of this stage meets in the set's store.
  if (a.lockstep && a.expert_store) {
    auto expert_store = std::make_shared<registry_store>(sys, a.expert_store);
    args.make_expert_collective = [expert_store, options, name = fmt::format("{}/ep/{}", a.expert_prefix, a.stage),
                                   stage = a.stage, rank = args.spec.ep_rank(),
                                   size = args.spec.ep_size()](backend& be) {
      return comm::make_group_collective(*expert_store, name, rank, size, be, options, stage, "EP");
    };
  }
  if (a.stage > 0) {
    args.make_prev_link = [store, options, prefix, stage = a.stage, rank = group_rank](backend& be) {
      return comm::make_activation_link(*store, fmt::format("{}/pp/{}/{}", prefix, stage - 1, rank), 1, be, options);
    };
  }
  if (a.stage + 1 < a.pp_size) {
    args.make_next_link = [store, options, prefix, stage = a.stage, rank = group_rank](backend& be) {
      return comm::make_activation_link(*store, fmt::format("{}/pp/{}/{}", prefix, stage, rank), 0, be, options);
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
