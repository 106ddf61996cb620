// The engine actor.
#include "actors/runtime/engine_actor.hpp"

#include "actorllm/proto/error.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <fmt/format.h>

#include <unordered_map>

namespace actorllm::actors {

namespace {

struct engine_state {
  std::optional<output_processor> proc;
  proto::scheduler_actor scheduler;
  std::unordered_map<uint64_t, proto::output_sink> sinks;  // per live request
  bool shutting_down = false;
};

using engine_pointer = proto::engine_actor::stateful_pointer<engine_state>;

// One output_batch per submitter; a step rarely has more than a few.
class batches {
 public:
  proto::output_batch& for_sink(const proto::output_sink& sink) {
    for (auto& [s, b] : entries_)
      if (s == sink)
        return b;
    return entries_.emplace_back(sink, proto::output_batch{}).second;
  }
  void send(engine_pointer self) {
    for (auto& [sink, batch] : entries_)
      if (sink && !batch.empty())
        self->send(sink, std::move(batch));
    entries_.clear();
  }

 private:
  std::vector<std::pair<proto::output_sink, proto::output_batch>> entries_;
};

void fail_request(engine_pointer self, uint64_t request_id, const proto::output_sink& sink, errc code,
                  std::string message) {
  if (!sink)
    return;
  proto::output_batch b;
  b.failures.push_back({request_id, code, std::move(message)});
  self->send(sink, std::move(b));
}

void on_submit(engine_pointer self, proto::submit_request& req) {
  auto& st = self->state;
  if (st.shutting_down)
    return fail_request(self, req.request_id, req.sink, errc::shut_down,
                        fmt::format("request {}: the engine is shutting down", req.request_id));
  auto spec = st.proc->add(req);
  if (!spec)
    return fail_request(self, req.request_id, req.sink, proto::to_errc(spec.error().code), spec.error().message);
  const uint64_t id = req.request_id;
  st.sinks.insert_or_assign(id, req.sink);
  self->request(st.scheduler, caf::infinite, std::move(*spec))
      .then([](caf::ok_atom) {},
            [self, id](caf::error& err) {
              auto& s = self->state;
              if (!s.proc->contains(id))
                return;
              s.proc->forget(id);
              auto it = s.sinks.find(id);
              if (it != s.sinks.end()) {
                fail_request(self, id, it->second, proto::code_of(err), proto::message_of(err));
                s.sinks.erase(it);
              }
            });
}

void on_update(engine_pointer self, proto::step_update& upd) {
  auto& st = self->state;
  batches out;
  if (!upd.failure.empty()) {
    for (uint64_t id : st.proc->request_ids()) {
      st.proc->forget(id);
      auto& b = out.for_sink(st.sinks[id]);
      b.failures.push_back(
          {id, errc::engine_failure, fmt::format("request {}: the engine failed: {}", id, upd.failure)});
    }
    st.sinks.clear();
    out.send(self);
    return;
  }
  output_processor::step_outputs step;
  st.proc->process(upd, step);
  if (!step.stopped.empty())
    self->send(st.scheduler, proto::finish_sequences{std::move(step.stopped)});
  for (auto& d : step.deltas) {
    auto it = st.sinks.find(d.request_id);
    if (it != st.sinks.end())
      out.for_sink(it->second).deltas.push_back(std::move(d));
  }
  for (auto& o : step.finished) {
    auto it = st.sinks.find(o.request_id);
    if (it == st.sinks.end())
      continue;
    out.for_sink(it->second).outputs.push_back(std::move(o));
    st.sinks.erase(it);
  }
  out.send(self);
}

// Finishes a request in the engine (its output goes out now) and returns whether it was live.
bool abort_here(engine_pointer self, uint64_t request_id) {
  auto& st = self->state;
  auto out = st.proc->abort(request_id);
  if (!out)
    return false;
  auto it = st.sinks.find(request_id);
  if (it != st.sinks.end()) {
    if (it->second) {
      proto::output_batch b;
      b.outputs.push_back(std::move(*out));
      self->send(it->second, std::move(b));
    }
    st.sinks.erase(it);
  }
  return true;
}

proto::engine_actor::behavior_type engine_behavior(engine_pointer self, engine_args args) {
  auto& st = self->state;
  st.proc.emplace(std::move(args.tokenizer), std::move(args.limits));
  st.scheduler = std::move(args.scheduler);
  self->send(st.scheduler, proto::connect_atom::value, caf::actor_cast<proto::update_sink>(self));
  return {
      [self](proto::submit_request& req) { on_submit(self, req); },
      [self](proto::abort_atom, uint64_t request_id) -> caf::result<bool> {
        if (!abort_here(self, request_id))
          return false;
        // Reply once the scheduler has freed the blocks, so the caller's next look at the stats sees them free.
        auto rp = self->make_response_promise<bool>();
        self->request(self->state.scheduler, caf::infinite, proto::abort_atom::value, request_id)
            .then([rp](bool) mutable { rp.deliver(true); }, [rp](caf::error& err) mutable { rp.deliver(err); });
        return rp;
      },
      [self](proto::step_update& upd) { on_update(self, upd); },
      [self](caf::get_atom, proto::stats_atom) -> caf::result<engine_stats> {
        auto rp = self->make_response_promise<engine_stats>();
        self->request(self->state.scheduler, caf::infinite, caf::get_atom::value, proto::stats_atom::value)
            .then(
                [self, rp](engine_stats& s) mutable {
                  s.n_requests = self->state.proc->size();
                  rp.deliver(std::move(s));
                },
                [rp](caf::error& err) mutable { rp.deliver(err); });
        return rp;
      },
      [self](proto::reset_prefix_cache_atom) -> caf::result<int32_t> {
        return self->delegate(self->state.scheduler, proto::reset_prefix_cache_atom::value);
      },
      [self](proto::shutdown_atom) -> caf::result<caf::ok_atom> {
        auto& s = self->state;
        s.shutting_down = true;
        for (uint64_t id : s.proc->request_ids())
          abort_here(self, id);
        auto rp = self->make_response_promise<caf::ok_atom>();
        self->request(s.scheduler, caf::infinite, proto::shutdown_atom::value)
            .then([rp](caf::ok_atom) mutable { rp.deliver(caf::ok_atom::value); },
                  [rp](caf::error& err) mutable { rp.deliver(err); });
        return rp;
      },
  };
}

}  // namespace

proto::engine_actor spawn_engine(caf::actor_system& sys, engine_args args) {
  return sys.spawn(engine_behavior, std::move(args));
}

}  // namespace actorllm::actors
