// The scheduler actor.
#include "actors/runtime/scheduler_actor.hpp"

#include "actorllm/proto/error.hpp"
#include "engine/block_table_mirror.hpp"
#include "engine/lockstep_rounds.hpp"
#include "engine/scheduler_core.hpp"
#include "engine/step_pace.hpp"
#include "util/check.hpp"
#include "util/log.hpp"

#include <caf/actor_clock.hpp>
#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace actorllm::actors {

namespace {

errc to_errc(engine::engine_errc code) {
  switch (code) {
    case engine::engine_errc::invalid_argument:
      return errc::invalid_argument;
    case engine::engine_errc::duplicate_request:
      return errc::duplicate_request;
    case engine::engine_errc::unknown_request:
      return errc::unknown_request;
    case engine::engine_errc::exceeds_max_model_len:
      return errc::exceeds_max_model_len;
    case engine::engine_errc::exceeds_kv_cache:
      return errc::exceeds_kv_cache;
    case engine::engine_errc::too_many_sequences:
      return errc::too_many_sequences;
    default:
      return errc::internal;
  }
}

finish_reason to_public(engine::finish_reason r) {
  switch (r) {
    case engine::finish_reason::stop:
      return finish_reason::stop;
    case engine::finish_reason::length:
      return finish_reason::length;
    case engine::finish_reason::abort:
      return finish_reason::abort;
  }
  return finish_reason::abort;
}

struct scheduler_state {
  std::optional<engine::scheduler_core> core;
  std::vector<proto::shard_link> shards;  // every shard of the replica: each gets every plan
  engine::block_table_mirror tables;      // the block tables the shards hold after the plans sent so far
  proto::update_sink engine;
  std::set<uint64_t> live;                                     // requests the core holds
  std::unordered_map<uint64_t, proto::sampler_setup> pending;  // sampler setups not sent yet
  std::unordered_set<uint64_t> introduced;                     // requests whose setup went out
  std::vector<uint64_t> releases;                              // introduced, finished, release not sent yet
  std::unordered_map<uint64_t, std::vector<engine::seq_id>> in_flight_samples;  // step -> its sample rows
  std::map<int32_t, proto::lora_ref> loras;  // the LoRA adapters requests named, by id (ids are never reused)
  struct in_flight {
    caf::actor_clock::time_point since;  // when it went out
    int64_t tokens = 0;                  // its query tokens
  };
  std::map<uint64_t, in_flight> dispatched;              // the steps in flight
  std::chrono::milliseconds step_timeout{0};             // zero: no limit
  engine::step_pace pace{std::chrono::milliseconds{0}};  // the timeout stretched for long or slowed steps
  bool watch_armed = false;                              // a step_watch is on its way
  uint64_t n_steps = 0;
  double forward_seconds = 0.0;         // summed over steps, as the sampler shard reported them
  std::vector<uint64_t> expert_tokens;  // the sampler shard's latest totals (MoE models)
  double sample_seconds = 0.0;
  bool healthy = true;
  std::string failure;
  bool draining = false;
  std::vector<caf::typed_response_promise<caf::ok_atom>> drained;
  bool lockstep = false;                 // expert parallelism over lockstep replicas
  engine::lockstep_rounds rounds;        // steps dispatched here and by the peers
  std::vector<proto::round_sink> peers;  // the other replicas' schedulers
};

using scheduler_pointer = proto::scheduler_actor::stateful_pointer<scheduler_state>;

void on_events(scheduler_state& st, const std::vector<engine::seq_event>& events) {
  for (const auto& e : events) {
    if (e.finished)
      st.tables.forget(e.seq);
    if (!e.request_finished)
      continue;
    const uint64_t id = e.seq.request_id;
    st.live.erase(id);
    st.pending.erase(id);
    if (st.introduced.erase(id) > 0)
      st.releases.push_back(id);
  }
}

/// How often the step watch looks: a quarter of the timeout, between 10 ms and 1 s.
std::chrono::milliseconds step_watch_interval(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds{10}, std::chrono::milliseconds{1000});
}

void arm_step_watch(scheduler_pointer self) {
  auto& st = self->state;
  if (st.step_timeout.count() <= 0 || st.watch_armed)
    return;
  st.watch_armed = true;
  self->delayed_send(self, step_watch_interval(st.step_timeout), proto::step_watch_atom::value);
}

void dispatch(scheduler_pointer self, engine::step_plan&& plan) {
  auto& st = self->state;
  proto::step_plan p;
  p.step_id = plan.step_id;
  p.tokens = std::move(plan.batch.tokens);
  p.positions = std::move(plan.batch.positions);
  p.sample_rows = std::move(plan.batch.sample_rows);
  // Block tables as a diff against what the shards hold: preempted sequences first (the plan may re-admit one).
  for (const auto& seq : plan.preempted)
    st.tables.forget(seq);
  p.sequences.reserve(plan.batch.sequences.size());
  for (size_t i = 0; i < plan.batch.sequences.size(); ++i) {
    const auto& s = plan.batch.sequences[i];
    const engine::seq_id seq = plan.batch_seqs[i];
    engine::table_delta delta = st.tables.update(seq, s.block_table);
    p.sequences.push_back({seq, s.query_begin, s.n_query, delta.new_table, std::move(delta.blocks), s.lora_id});
    if (s.lora_id != 0 &&
        std::none_of(p.loras.begin(), p.loras.end(), [&](const proto::lora_ref& l) { return l.id == s.lora_id; }))
      p.loras.push_back(st.loras.at(s.lora_id));
  }
  p.dropped_seqs = st.tables.take_dropped();
  p.sample_seqs = plan.sample_seqs;
  p.score_rows = std::move(plan.score_rows);
  p.score_seqs = std::move(plan.score_seqs);
  p.score_positions = std::move(plan.score_positions);
  p.score_tokens = std::move(plan.score_tokens);
  // The sampler learns a request's settings with its first sample or score row.
  for (const auto* seqs : {&p.score_seqs, &p.sample_seqs}) {
    for (const auto& seq : *seqs) {
      if (auto it = st.pending.find(seq.request_id); it != st.pending.end()) {
        p.new_requests.push_back(std::move(it->second));
        st.pending.erase(it);
        st.introduced.insert(seq.request_id);
      }
    }
  }
  p.released_requests = std::move(st.releases);
  st.releases.clear();
  st.in_flight_samples.emplace(plan.step_id, std::move(plan.sample_seqs));
  st.dispatched.emplace(p.step_id,
                        scheduler_state::in_flight{self->clock().now(), static_cast<int64_t>(p.tokens.size())});
  arm_step_watch(self);
  // One plan for the whole replica: shared in process, serialized once for every shard in other processes. The last
  // stage first, so that a plan tends to be waiting when the previous stage's output arrives.
  const proto::shared_plan shared{std::make_shared<const proto::step_plan>(std::move(p))};
  for (auto it = st.shards.rbegin(); it != st.shards.rend(); ++it)
    self->send(*it, shared);
  if (st.lockstep) {
    const uint64_t round = st.rounds.on_step();
    for (const auto& peer : st.peers)
      self->send(peer, proto::lockstep_round_atom::value, round);
  }
}

// Lockstep expert parallelism: with no step of its own in flight, idle plans until this replica has dispatched as
// many steps as its peers (their steps wait in the MoE exchanges for this replica's shards). Idle plans are not
// announced: the step they pair with was, to every peer.
void keep_lockstep(scheduler_pointer self) {
  auto& st = self->state;
  if (!st.lockstep || !st.healthy)
    return;
  for (uint64_t n = st.rounds.idle_steps_owed(st.core->n_in_flight() > 0); n > 0; --n) {
    proto::step_plan p;
    p.idle = true;
    const proto::shared_plan shared{std::make_shared<const proto::step_plan>(std::move(p))};
    for (const auto& shard : st.shards)
      self->send(shard, shared);
    st.rounds.on_step();
  }
}

void try_schedule(scheduler_pointer self) {
  auto& st = self->state;
  // Sequences that ended and requests released while no plan went out ride the next plan: until then the shards
  // keep a little state nobody reads.
  if (st.healthy && !st.draining)
    while (auto plan = st.core->schedule())
      dispatch(self, std::move(*plan));
  keep_lockstep(self);  // also while draining: a peer's step in flight may still need this replica's experts
  if (st.core->n_in_flight() == 0 || !st.healthy) {
    for (auto& rp : st.drained)
      rp.deliver(caf::ok_atom::value);
    st.drained.clear();
  }
}

void abort_all(scheduler_state& st) {
  for (uint64_t id : std::vector<uint64_t>(st.live.begin(), st.live.end()))
    if (auto events = st.core->abort(id))
      on_events(st, *events);
}

void fail(scheduler_pointer self, std::string message) {
  auto& st = self->state;
  if (!st.healthy)
    return;
  log::error("scheduler", "the replica failed: {}", message);
  st.healthy = false;
  st.failure = message;
  abort_all(st);
  if (st.engine) {
    proto::step_update upd;
    upd.failure = std::move(message);
    self->send(st.engine, std::move(upd));
  }
}

void on_result(scheduler_pointer self, proto::step_result& result) {
  auto& st = self->state;
  if (!result.error.empty())
    return fail(self, result.error);
  auto samples_it = st.in_flight_samples.find(result.step_id);
  if (samples_it == st.in_flight_samples.end())
    return fail(self, fmt::format("a result for step {}, which is not in flight", result.step_id));
  std::vector<engine::seq_id> samples = std::move(samples_it->second);
  st.in_flight_samples.erase(samples_it);
  if (auto it = st.dispatched.find(result.step_id); it != st.dispatched.end()) {
    st.pace.observe(it->second.tokens, self->clock().now() - it->second.since);
    st.dispatched.erase(it);
  }
  std::vector<int32_t> tokens;
  tokens.reserve(result.tokens.size());
  for (const auto& t : result.tokens)
    tokens.push_back(t.token);
  auto events = st.core->update_from_output(result.step_id, tokens);
  if (!events)
    return fail(self, events.error().message);
  ++st.n_steps;
  st.forward_seconds += result.forward_seconds;
  st.sample_seconds += result.sample_seconds;
  if (!result.expert_tokens.empty())
    st.expert_tokens = std::move(result.expert_tokens);
  on_events(st, *events);
  // Events come in sample order, skipping sequences that ended while the step ran: walk both lists together.
  proto::step_update upd;
  upd.step_id = result.step_id;
  upd.prompts.reserve(result.prompt_scores.size());
  for (auto& s : result.prompt_scores)  // the engine ignores those of requests that ended meanwhile
    upd.prompts.push_back({s.seq.request_id, s.position, {s.token, s.logprob, s.rank, std::move(s.top)}});
  upd.seqs.reserve(events->size());
  size_t row = 0;
  for (const auto& e : *events) {
    while (row < samples.size() && samples[row] != e.seq)
      ++row;
    ACTORLLM_CHECK(row < samples.size(), "a step event for a sequence the step did not sample");
    proto::sampled_token& tok = result.tokens[row];
    proto::seq_update u;
    u.request_id = e.seq.request_id;
    u.index = e.seq.index;
    u.token = e.new_token;
    u.logprob = tok.logprob;
    u.top = std::move(tok.top);
    u.num_cached_tokens = e.n_cached_tokens;
    if (e.finished)
      u.finished = to_public(*e.finished);
    upd.seqs.push_back(std::move(u));
    ++row;
  }
  if (st.engine && (!upd.seqs.empty() || !upd.prompts.empty()))
    self->send(st.engine, std::move(upd));
  try_schedule(self);
}

proto::scheduler_actor::behavior_type scheduler_behavior(scheduler_pointer self, scheduler_args args) {
  auto core = engine::scheduler_core::create(args.config);
  ACTORLLM_CHECK(core.has_value(), "the scheduler was spawned with an invalid config");
  self->state.core.emplace(std::move(*core));
  self->state.shards = std::move(args.shards);
  self->state.step_timeout = args.step_timeout;
  self->state.pace = engine::step_pace{args.step_timeout};
  self->state.lockstep = args.lockstep;
  return {
      [self](proto::request_spec& spec) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        if (!st.healthy)
          return proto::make_error(errc::engine_failure, "the engine failed and takes no requests: " + st.failure);
        if (st.draining)
          return proto::make_error(errc::shut_down, "the engine is shutting down");
        engine::request req;
        req.id = spec.request_id;
        req.prompt = spec.prompt_ids;
        req.max_tokens = spec.max_tokens;
        req.n = spec.n;
        req.priority = spec.priority;
        req.eos_token_ids = std::move(spec.eos_token_ids);
        req.ignore_eos = spec.ignore_eos;
        req.stop_token_ids = std::move(spec.stop_token_ids);
        req.min_tokens = spec.min_tokens;
        req.cache_salt = spec.cache_salt;
        req.resume_output = spec.resume_output_ids;
        req.score_prompt = spec.sampling.prompt_logprobs >= 0;
        req.lora_id = spec.lora.id;
        if (auto added = st.core->add_request(std::move(req)); !added)
          return proto::make_error(to_errc(added.error().code), added.error().message);
        st.live.insert(spec.request_id);
        if (spec.lora.id != 0)
          st.loras.insert_or_assign(spec.lora.id, spec.lora);
        proto::sampler_setup setup;
        setup.request_id = spec.request_id;
        setup.spec = spec.sampling;
        if (spec.sampling.repetition_penalty != 1.0f)
          setup.prompt_ids = std::move(spec.prompt_ids);
        setup.resume_output_ids = std::move(spec.resume_output_ids);
        st.pending.insert_or_assign(spec.request_id, std::move(setup));
        try_schedule(self);
        return caf::ok_atom::value;
      },
      [self](proto::abort_atom, uint64_t request_id) -> bool {
        auto& st = self->state;
        if (!st.live.contains(request_id))
          return false;
        auto events = st.core->abort(request_id);
        if (events)
          on_events(st, *events);
        try_schedule(self);
        return events.has_value();
      },
      [self](proto::finish_sequences& fin) {
        auto& st = self->state;
        for (const auto& seq : fin.seqs)
          if (auto events = st.core->finish_sequence(seq, engine::finish_reason::stop))
            on_events(st, *events);
        try_schedule(self);
      },
      [self](proto::step_result& result) { on_result(self, result); },
      [self](proto::connect_atom, proto::update_sink sink) { self->state.engine = std::move(sink); },
      [self](proto::lockstep_round_atom, uint64_t round) {
        self->state.rounds.peer_reached(round);
        keep_lockstep(self);
      },
      [self](proto::connect_atom, proto::round_sink peer) -> caf::ok_atom {
        self->state.peers.push_back(std::move(peer));
        return caf::ok_atom::value;
      },
      [self](caf::get_atom, proto::stats_atom) -> engine_stats {
        const auto& st = self->state;
        const auto& c = *st.core;
        engine_stats s;
        s.healthy = st.healthy;
        s.failure = st.failure;
        s.n_requests = c.n_requests();
        s.n_running = c.n_running();
        s.n_waiting = c.n_waiting();
        s.n_preemptions = c.n_preemptions();
        s.n_steps = st.n_steps;
        s.n_steps_in_flight = c.n_in_flight();
        s.n_blocks = c.allocator().n_blocks();
        s.n_free_blocks = c.allocator().n_free_blocks();
        s.block_size = c.allocator().block_size();
        s.kv_cache_usage = c.kv_cache_usage();
        s.prefix_cache_queries = c.prefix_cache_queries();
        s.prefix_cache_hits = c.prefix_cache_hits();
        s.n_cached_blocks = c.allocator().n_cached_blocks();
        s.forward_seconds = st.forward_seconds;
        s.sample_seconds = st.sample_seconds;
        s.expert_tokens = st.expert_tokens;
        return s;
      },
      [self](proto::reset_prefix_cache_atom) -> int32_t {
        const int32_t n = self->state.core->reset_prefix_cache();
        log::info("scheduler", "Reset the prefix cache: {} cached blocks forgotten", n);
        return n;
      },
      [self](proto::step_watch_atom) {
        auto& st = self->state;
        st.watch_armed = false;
        if (!st.healthy || st.dispatched.empty())
          return;
        // Every step in flight against its own limit: a long prefill behind a short decode step must not be judged
        // by the decode step's limit, nor the other way round.
        for (const auto& [step, f] : st.dispatched) {
          const auto waited = self->clock().now() - f.since;
          const auto limit = st.pace.limit(f.tokens);
          if (waited > limit)
            return fail(self,
                        fmt::format("step {} got no result within {:.1f} s (the step timeout of {:.1f} s, stretched "
                                    "for its {} tokens at the recent pace of {:.3f} s per token): a shard, or a link "
                                    "between stages, stopped answering",
                                    step, std::chrono::duration<double>(limit).count(),
                                    std::chrono::duration<double>(st.step_timeout).count(), f.tokens,
                                    st.pace.seconds_per_token()));
        }
        arm_step_watch(self);
      },
      [self](proto::shutdown_atom) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        st.draining = true;
        abort_all(st);
        if (st.core->n_in_flight() == 0 || !st.healthy)
          return caf::ok_atom::value;
        auto rp = self->make_response_promise<caf::ok_atom>();
        st.drained.push_back(rp);
        return rp;
      },
  };
}

}  // namespace

proto::scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_args args) {
  return sys.spawn(scheduler_behavior, std::move(args));
}

}  // namespace actorllm::actors
