// The worker registry: admission by token, and the rendezvous store.
#include "actors/cluster/worker_registry.hpp"

#include "actorllm/proto/error.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <fmt/format.h>

#include <map>
#include <set>
#include <vector>

namespace actorllm::actors {
namespace {

struct registry_state {
  worker_registry_args args;
  std::set<int32_t> admitted;
  std::map<std::string, std::string> store;
  std::map<std::string, std::vector<caf::typed_response_promise<std::string>>> waiting;
  std::string closed;  ///< why the store closed; empty while open
};

using registry_pointer = proto::worker_registry_actor::stateful_pointer<registry_state>;

proto::worker_registry_actor::behavior_type registry_behavior(registry_pointer self, worker_registry_args args) {
  self->state.args = std::move(args);
  return {
      [self](proto::register_atom, proto::worker_hello& hello) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        if (hello.token != st.args.token) {
          log::warning("registry", "refused worker {} (pid {} on {}): wrong token", hello.index, hello.pid, hello.host);
          return proto::make_error(errc::invalid_config, "wrong worker token: this worker belongs to another engine");
        }
        if (hello.index < 0 || hello.index >= st.args.n_workers)
          return proto::make_error(errc::invalid_config,
                                   fmt::format("worker index {} is outside [0, {})", hello.index, st.args.n_workers));
        if (!st.admitted.insert(hello.index).second)
          return proto::make_error(errc::invalid_config, fmt::format("worker {} registered twice", hello.index));
        if (!hello.worker)
          return proto::make_error(errc::invalid_config, "a worker registered without its handle");
        log::debug("registry", "worker {} registered (pid {} on {})", hello.index, hello.pid, hello.host);
        caf::anon_send(st.args.listener, std::move(hello));
        return caf::ok_atom::value;
      },
      [self](proto::store_set_atom, std::string& key, std::string& value) -> caf::ok_atom {
        auto& st = self->state;
        if (auto it = st.waiting.find(key); it != st.waiting.end()) {
          for (auto& promise : it->second)
            promise.deliver(value);
          st.waiting.erase(it);
        }
        st.store.insert_or_assign(std::move(key), std::move(value));
        return caf::ok_atom::value;
      },
      [self](proto::store_get_atom, std::string& key) -> caf::result<std::string> {
        auto& st = self->state;
        if (auto it = st.store.find(key); it != st.store.end())
          return it->second;
        if (!st.closed.empty())
          return proto::make_error(errc::load_failed, fmt::format("the rendezvous store closed: {}", st.closed));
        auto promise = self->make_response_promise<std::string>();
        st.waiting[key].push_back(promise);
        return promise;
      },
      [self](proto::store_close_atom, std::string& why) {
        auto& st = self->state;
        if (!st.closed.empty())
          return;
        st.closed = why.empty() ? "closed" : why;
        const caf::error err = proto::make_error(errc::load_failed, "the rendezvous store closed: " + st.closed);
        for (auto& [key, promises] : st.waiting)
          for (auto& promise : promises)
            promise.deliver(err);
        st.waiting.clear();
      },
  };
}

}  // namespace

proto::worker_registry_actor spawn_worker_registry(caf::actor_system& sys, worker_registry_args args) {
  return sys.spawn(registry_behavior, std::move(args));
}

}  // namespace actorllm::actors
