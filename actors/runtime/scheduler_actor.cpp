// The scheduler actor.
#include "actors/runtime/scheduler_actor.hpp"

#include "actorllm/proto/error.hpp"
#include "engine/lockstep_rounds.hpp"
#include "engine/scheduler_core.hpp"
#include "engine/step_watch.hpp"
#include "util/check.hpp"
#include "util/log.hpp"
#include "util/work_progress.hpp"

#include <caf/actor_clock.hpp>
#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <fmt/format.h>

#include <optional>

namespace actorllm::actors {

namespace {

struct scheduler_state {
  std::optional<engine::scheduler_core> core;
  std::vector<proto::shard_link> shards;  // every shard of the replica: each gets every plan
  proto::update_sink engine;
  engine::step_watch watch{std::chrono::milliseconds{0}};  // the steps in flight against the step timeout
  uint64_t n_steps = 0;
  double forward_seconds = 0.0;         // summed over steps, as the sampler shard reported them
  std::vector<uint64_t> expert_tokens;  // the sampler shard's latest totals (MoE models)
  model::eplb_stats eplb;               // its stage's expert-parallel load balancing, as last reported
  uint64_t ep_exchange_bytes = 0;       // its sampler shard's EP exchanges, as last reported
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

void arm_step_watch(scheduler_pointer self) {
  if (self->state.watch.arm())
    self->delayed_send(self, self->state.watch.interval(), proto::step_watch_atom::value);
}

void dispatch(scheduler_pointer self, engine::step_plan&& plan) {
  auto& st = self->state;
  st.watch.dispatched(plan.step_id, plan.n_tokens(), self->clock().now());
  arm_step_watch(self);
  // One plan for the whole replica: shared in process, serialized once for every shard in other processes. The last
  // stage first, so that a plan tends to be waiting when the previous stage's output arrives.
  const proto::shared_plan shared{std::make_shared<const proto::step_plan>(std::move(plan))};
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

void fail(scheduler_pointer self, std::string message) {
  auto& st = self->state;
  if (!st.healthy)
    return;
  log::error("scheduler", "the replica failed: {}", message);
  st.healthy = false;
  st.failure = message;
  (void)st.core->abort_all();
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
  st.watch.completed(result.step_id, self->clock().now());
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
  st.eplb = result.eplb;
  st.ep_exchange_bytes = result.ep_exchange_bytes;
  proto::step_update upd = proto::make_step_update(result, *events);
  if (st.engine && (!upd.seqs.empty() || !upd.prompts.empty()))
    self->send(st.engine, std::move(upd));
  try_schedule(self);
}

engine_stats stats_of(const scheduler_state& st) {
  const engine::scheduler_core& c = *st.core;
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
  s.ep_exchange_bytes = st.ep_exchange_bytes;
  s.eplb = eplb_report{st.eplb.rearrangements, st.eplb.last_stall_seconds, st.eplb.mean_before,
                       st.eplb.max_before,     st.eplb.mean_after,         st.eplb.max_after};
  return s;
}

proto::scheduler_actor::behavior_type scheduler_behavior(scheduler_pointer self, scheduler_args args) {
  auto core = engine::scheduler_core::create(args.config);
  ACTORLLM_CHECK(core.has_value(), "the scheduler was spawned with an invalid config");
  self->state.core.emplace(std::move(*core));
  self->state.shards = std::move(args.shards);
  self->state.watch = engine::step_watch{args.step_timeout};
  self->state.lockstep = args.lockstep;
  return {
      [self](proto::request_spec& spec) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        if (!st.healthy)
          return proto::make_error(errc::engine_failure, "the engine failed and takes no requests: " + st.failure);
        if (st.draining)
          return proto::make_error(errc::shut_down, "the engine is shutting down");
        if (auto added = st.core->add_request(proto::to_engine_request(std::move(spec))); !added)
          return proto::make_error(added.error());
        try_schedule(self);
        return caf::ok_atom::value;
      },
      [self](proto::abort_atom, uint64_t request_id) -> bool {
        auto& st = self->state;
        if (!st.core->has_request(request_id))
          return false;
        const bool aborted = st.core->abort(request_id).has_value();
        try_schedule(self);
        return aborted;
      },
      [self](proto::finish_sequences& fin) {
        for (const auto& seq : fin.seqs)
          (void)self->state.core->finish_sequence(seq, engine::finish_reason::stop);  // unknown: ended meanwhile
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
      [self](caf::get_atom, proto::stats_atom) -> engine_stats { return stats_of(self->state); },
      [self](proto::reset_prefix_cache_atom) -> int32_t {
        const int32_t n = self->state.core->reset_prefix_cache();
        log::info("scheduler", "Reset the prefix cache: {} cached blocks forgotten", n);
        return n;
      },
      [self](proto::step_watch_atom) {
        auto& st = self->state;
        const std::string lost = st.watch.check(self->clock().now(), util::work_progress());
        if (!st.healthy || st.watch.n_in_flight() == 0)
          return;
        if (!lost.empty())
          return fail(self, lost);
        arm_step_watch(self);
      },
      [self](proto::shutdown_atom) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        st.draining = true;
        (void)st.core->abort_all();
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
