// The engines' callback calls: see engine_calls.hpp.
#include "api/engine_calls.hpp"

#include "actorllm/proto/atoms.hpp"
#include "actorllm/proto/error.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include <algorithm>
#include <exception>
#include <memory>
#include <utility>

namespace actorllm::detail {

namespace {

/// One engine's reply to a fanned-out request.
template <class T>
struct engine_reply {
  bool asked = false;
  std::optional<T> value;
  caf::error error;  ///< set when asked and no value came
};

/// Sends one request to each non-null engine from a fresh actor (`ask(self, engine)` returns the request's handle)
/// and calls `done` once with every reply, in the engines' order, when the last one arrived. The actor lives until
/// then: its pending replies keep it alive, and it needs no behaviour of its own.
///
/// An engine that terminates before it replies settles its reply at once, from the actor's monitor: CAF 0.17 sends
/// nothing for a response promise that dies undelivered, so an engine torn down while it waited on its scheduler (a
/// replica whose worker was killed) would otherwise hold the call for the whole engine_call_timeout. A /health probe
/// during a worker's restart took 10 s that way, once in many runs.
template <class T, class Ask>
void fan_out(caf::actor_system& sys, std::vector<proto::engine_actor> engines, Ask ask,
             std::function<void(std::vector<engine_reply<T>>)> done) {
  sys.spawn([engines = std::move(engines), ask = std::move(ask), done = std::move(done)](caf::event_based_actor* self) {
    struct state {
      std::vector<engine_reply<T>> replies;
      std::vector<bool> settled;  // per engine: its reply (a value, an error or its down message) came
      std::size_t pending = 0;
      std::function<void(std::vector<engine_reply<T>>)> done;
      // Engine i's reply came; the first of its reply and its down message counts, the other is dropped.
      bool settle_one(std::size_t i) {
        if (settled[i])
          return false;
        settled[i] = true;
        return true;
      }
      caf::event_based_actor* self = nullptr;
      void settle() {
        if (--pending > 0)
          return;
        try {
          done(std::move(replies));
        } catch (const std::exception& e) {  // a callback must not take the actor down with it
          log::error("engine", "a callback of an engine call failed: {}", e.what());
        }
        self->quit();  // drops the requests still pending (an engine settled by its down message)
      }
    };
    auto st = std::make_shared<state>();
    st->replies.resize(engines.size());
    st->settled.resize(engines.size(), false);
    st->done = done;
    st->self = self;
    st->pending = 1;  // held until every request went out, so that no early reply settles the call
    self->set_down_handler([st, engines](caf::down_msg& msg) {
      for (std::size_t i = 0; i < engines.size(); ++i)
        if (engines[i] && engines[i].address() == msg.source && st->settle_one(i)) {
          st->replies[i].error = caf::make_error(caf::sec::request_receiver_down);
          st->settle();
        }
    });
    for (std::size_t i = 0; i < engines.size(); ++i) {
      if (!engines[i])
        continue;
      st->replies[i].asked = true;
      ++st->pending;
      self->monitor(engines[i]);  // a down message comes at once if it is gone already
      ask(self, engines[i])
          .then(
              [st, i](T& value) {
                if (!st->settle_one(i))
                  return;
                st->replies[i].value = std::move(value);
                st->settle();
              },
              [st, i](caf::error& err) {
                if (!st->settle_one(i))
                  return;
                st->replies[i].error = std::move(err);
                st->settle();
              });
    }
    st->settle();
  });
}

}  // namespace

void ask_stats(caf::actor_system& sys, std::vector<proto::engine_actor> engines,
               std::function<void(std::vector<stats_answer>)> done) {
  fan_out<engine_stats>(
      sys, std::move(engines),
      [](caf::event_based_actor* self, const proto::engine_actor& engine) {
        return self->request(engine, engine_call_timeout, caf::get_atom::value, proto::stats_atom::value);
      },
      [&sys, done = std::move(done)](std::vector<engine_reply<engine_stats>> replies) {
        std::vector<stats_answer> answers(replies.size());
        for (std::size_t i = 0; i < replies.size(); ++i) {
          answers[i].asked = replies[i].asked;
          answers[i].stats = std::move(replies[i].value);
          if (replies[i].asked && !answers[i].stats)
            answers[i].failure = "the engine did not answer: " + sys.render(replies[i].error);
        }
        done(std::move(answers));
      });
}

engine_stats merge_stats(engine_stats out, const std::vector<stats_answer>& answers) {
  bool first = true;
  for (std::size_t i = 0; i < answers.size() && i < out.replicas.size(); ++i) {
    const stats_answer& a = answers[i];
    if (!a.asked)
      continue;
    replica_stats& rs = out.replicas[i];
    if (!a.stats) {
      // The engine went away (a replica being replaced) or did not answer: report, don't throw.
      rs.healthy = false;
      rs.failure = a.failure;
      continue;
    }
    const engine_stats& s = *a.stats;
    rs.healthy = s.healthy;
    if (!s.healthy)
      rs.failure = s.failure;
    rs.n_running = s.n_running;
    rs.n_waiting = s.n_waiting;
    rs.kv_cache_usage = s.kv_cache_usage;
    rs.n_preemptions = s.n_preemptions;
    rs.prefix_cache_queries = s.prefix_cache_queries;
    rs.prefix_cache_hits = s.prefix_cache_hits;
    out.n_requests += s.n_requests;
    out.n_running += s.n_running;
    out.n_waiting += s.n_waiting;
    out.n_preemptions += s.n_preemptions;
    out.n_steps += s.n_steps;
    out.n_steps_in_flight += s.n_steps_in_flight;
    out.n_blocks = s.n_blocks;
    out.block_size = s.block_size;
    out.prefix_cache_queries += s.prefix_cache_queries;
    out.prefix_cache_hits += s.prefix_cache_hits;
    out.forward_seconds += s.forward_seconds;
    out.sample_seconds += s.sample_seconds;
    out.ep_exchange_bytes += s.ep_exchange_bytes;
    // Lockstep replicas share one EP group and report the same balancing; the most recent record wins.
    if (s.eplb.rearrangements > out.eplb.rearrangements)
      out.eplb = s.eplb;
    out.expert_tokens.resize(std::max(out.expert_tokens.size(), s.expert_tokens.size()), 0);
    for (std::size_t e = 0; e < s.expert_tokens.size(); ++e)
      out.expert_tokens[e] += s.expert_tokens[e];
    if (first) {
      // Block counts are per replica (the KV cache is not pooled): the first serving replica's.
      out.n_free_blocks = s.n_free_blocks;
      out.n_cached_blocks = s.n_cached_blocks;
      out.kv_cache_usage = s.kv_cache_usage;
    } else {
      out.kv_cache_usage = std::max(out.kv_cache_usage, s.kv_cache_usage);
    }
    first = false;
  }
  if (out.replicas.size() == 1 && !out.replicas.front().healthy) {
    out.healthy = false;
    if (out.failure.empty())
      out.failure = out.replicas.front().failure;
  } else if (std::none_of(out.replicas.begin(), out.replicas.end(), [](const auto& r) { return r.healthy; })) {
    out.healthy = false;
    if (out.failure.empty())
      out.failure = "no replica serves";
  }
  return out;
}

void reset_prefix_caches(caf::actor_system& sys, std::vector<proto::engine_actor> engines,
                         std::function<void(int32_t, std::optional<error>)> done) {
  fan_out<int32_t>(
      sys, std::move(engines),
      [](caf::event_based_actor* self, const proto::engine_actor& engine) {
        return self->request(engine, engine_call_timeout, proto::reset_prefix_cache_atom::value);
      },
      [done = std::move(done)](std::vector<engine_reply<int32_t>> replies) {
        int32_t forgotten = 0;
        std::optional<error> failure;
        for (const auto& r : replies) {
          if (r.value)
            forgotten += *r.value;
          else if (r.asked && !failure)
            failure = proto::to_exception(r.error);
        }
        done(forgotten, std::move(failure));
      });
}

}  // namespace actorllm::detail
