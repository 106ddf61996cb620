// The replica watch: see replica_watch.hpp.
#include "actors/executors/replica_watch.hpp"

#include "actorllm/proto/step_result.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <fmt/format.h>

#include <map>

namespace actorllm::actors {
namespace {

using tick_atom = caf::atom_constant<caf::atom("tick")>;

struct watch_state {
  replica_watch_args args;
  std::map<caf::actor_addr, std::string> names;  // what each watched actor is, for the message
  bool failed = false;
};

using watch_pointer = caf::stateful_actor<watch_state>*;

std::string shard_name(int32_t index, int32_t tp) {
  return fmt::format("the shard of stage {} rank {} (worker {})", index / tp, index % tp, index);
}

void report(watch_pointer self, std::string message) {
  auto& st = self->state;
  if (st.failed)
    return;
  st.failed = true;
  log::error("watch", "{}", message);
  // The engine first: its mailbox holds the failure before on_failure lets the owner stop the replica.
  if (st.args.engine) {
    proto::step_update update;
    update.failure = message;
    caf::anon_send(st.args.engine, std::move(update));
  }
  proto::step_result failure;
  failure.error = message;
  caf::anon_send(caf::actor_cast<proto::result_sink>(st.args.scheduler), std::move(failure));
  if (st.args.on_failure)
    st.args.on_failure(message);
  self->quit();
}

caf::behavior watch_behavior(watch_pointer self, replica_watch_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  for (size_t i = 0; i < st.args.workers.size(); ++i) {
    st.names[st.args.workers[i].address()] = fmt::format("worker {}", i);
    self->monitor(st.args.workers[i]);
  }
  for (size_t i = 0; i < st.args.shards.size(); ++i) {
    st.names[st.args.shards[i].address()] = shard_name(static_cast<int32_t>(i), st.args.tp_size);
    self->monitor(st.args.shards[i]);
  }
  self->set_down_handler([self](caf::down_msg& down) {
    auto it = self->state.names.find(down.source);
    const std::string who = it != self->state.names.end() ? it->second : std::string{"a worker"};
    report(self, fmt::format("{} is gone ({}): the replica cannot serve until it is restarted", who,
                             self->system().render(down.reason)));
  });
  self->send(self, tick_atom::value);
  return {
      [self](tick_atom) {
        auto& s = self->state;
        for (size_t i = 0; i < s.args.processes.size(); ++i)
          if (auto status = s.args.processes[i]->exit_status())
            return report(
                self, fmt::format("worker {} (pid {}) exited with status {}", i, s.args.processes[i]->pid(), *status));
        for (size_t i = 0; i < s.args.workers.size(); ++i) {
          self->request(s.args.workers[i], s.args.probe_timeout, proto::ping_atom::value)
              .then([](int32_t) {},
                    [self, i](caf::error& err) {
                      report(self, fmt::format("worker {} did not answer a ping within {} ms ({})", i,
                                               self->state.args.probe_timeout.count(), self->system().render(err)));
                    });
        }
        self->delayed_send(self, s.args.probe_interval, tick_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_replica_watch(caf::actor_system& sys, replica_watch_args args) {
  return sys.spawn(watch_behavior, std::move(args));
}

replica_watch_args watch_args_for(const replica& r, int32_t tp_size, std::function<void(std::string)> on_failure) {
  replica_watch_args a;
  a.shards = r.shards;
  a.workers = r.workers;
  a.processes = r.processes;
  a.scheduler = r.scheduler;
  a.engine = r.engine;
  a.tp_size = tp_size;
  a.on_failure = std::move(on_failure);
  return a;
}

}  // namespace actorllm::actors
