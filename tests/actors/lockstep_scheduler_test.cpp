// Lockstep expert parallelism as the schedulers see it: two replicas' schedulers, told of each other, each over a
// fake shard that answers a real plan at once (one token per sample row) and counts idle plans. Run by CAF's
// deterministic test coordinator. A replica with nothing to do dispatches exactly one idle plan per step of its
// busy peer, and none ahead of it; two busy replicas add none; a scheduler not in lockstep sends none.
#include "actorllm/proto/type_ids.hpp"
#include "actors/runtime/scheduler_actor.hpp"
#include "deterministic_system.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <vector>

using namespace actorllm;

namespace {

using fake_shard = caf::typed_actor<caf::reacts_to<proto::shared_plan>, caf::reacts_to<proto::stage_handoff>,
                                    caf::reacts_to<proto::connect_atom, proto::result_sink>>;

/// What a fake shard saw, in order: 'R' for a real plan, 'I' for an idle one.
using plan_log = std::shared_ptr<std::vector<char>>;

struct fake_shard_state {
  plan_log seen;  // first: CAF would build a state whose first member takes an actor pointer from the actor itself
  proto::result_sink results;
};

fake_shard::behavior_type fake_shard_behavior(fake_shard::stateful_pointer<fake_shard_state> self, plan_log seen) {
  self->state.seen = std::move(seen);
  return {
      [self](proto::shared_plan& p) {
        const proto::step_plan& plan = *p.plan;
        self->state.seen->push_back(plan.idle ? 'I' : 'R');
        if (plan.idle) {
          CHECK(plan.tokens.empty());
          CHECK(plan.sample_rows.empty());
          return;  // no result: the scheduler expects none
        }
        proto::step_result r;
        r.step_id = plan.step_id;
        r.tokens.resize(plan.sample_rows.size(), proto::sampled_token{7, 0.0f, {}});
        self->send(self->state.results, std::move(r));
      },
      [](proto::stage_handoff&) {},
      [self](proto::connect_atom, proto::result_sink sink) { self->state.results = std::move(sink); },
  };
}

struct lockstep_fixture : test::deterministic_system {
  std::vector<proto::scheduler_actor> schedulers;
  std::vector<fake_shard> shards;
  std::vector<plan_log> seen;

  explicit lockstep_fixture(bool lockstep, int n = 2) {
    for (int i = 0; i < n; ++i) {
      seen.push_back(std::make_shared<std::vector<char>>());
      shards.push_back(sys.spawn(fake_shard_behavior, seen.back()));
      actors::scheduler_args sa;
      sa.config.n_blocks = 64;
      sa.config.block_size = 4;
      sa.config.max_num_seqs = 4;
      sa.config.max_num_batched_tokens = 64;
      sa.config.max_model_len = 64;
      sa.shards.push_back(shards.back());
      sa.lockstep = lockstep;
      schedulers.push_back(actors::spawn_scheduler(sys, sa));
      self->send(shards.back(), proto::connect_atom::value, caf::actor_cast<proto::result_sink>(schedulers.back()));
    }
    if (lockstep)
      for (const auto& s : schedulers)
        for (const auto& peer : schedulers)
          if (peer != s)
            self->send(s, proto::connect_atom::value, caf::actor_cast<proto::round_sink>(peer));
    sched.run();
  }
  ~lockstep_fixture() {
    for (const auto& s : shards)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    for (const auto& s : schedulers)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    sched.run();
  }

  void submit(int replica, uint64_t id, int32_t max_tokens) {
    proto::request_spec spec;
    spec.request_id = id;
    spec.prompt_ids = {3, 4, 5};
    spec.max_tokens = max_tokens;
    spec.ignore_eos = true;
    self->send(schedulers[static_cast<size_t>(replica)], std::move(spec));
  }

  size_t count(int replica, char kind) const {
    const auto& v = *seen[static_cast<size_t>(replica)];
    return static_cast<size_t>(std::count(v.begin(), v.end(), kind));
  }
};

}  // namespace

TEST_CASE("lockstep schedulers: an idle replica runs one idle plan per step of its busy peer, none ahead") {
  lockstep_fixture f{true};
  f.submit(0, 1, 5);  // 5 steps: the prefill and 4 decodes
  f.sched.run();
  CHECK(f.count(0, 'R') == 5);
  CHECK(f.count(0, 'I') == 0);
  CHECK(f.count(1, 'R') == 0);
  CHECK(f.count(1, 'I') == 5);
  // Now the other way round, with both idle in between: nothing runs while nobody has work.
  f.submit(1, 2, 3);
  f.sched.run();
  CHECK(f.count(1, 'R') == 3);
  CHECK(f.count(0, 'I') == 3);
  CHECK(f.seen[0]->size() == f.seen[1]->size());  // equal step counts: every exchange found its partners
}

TEST_CASE("lockstep schedulers: two busy replicas need no idle plans until one runs out of work") {
  lockstep_fixture f{true, 3};
  f.submit(0, 1, 6);
  f.submit(1, 2, 2);
  f.sched.run();
  CHECK(f.count(0, 'R') == 6);
  CHECK(f.count(1, 'R') == 2);
  // Replica 2 had nothing: it matched every step; each ends with as many plans as the busiest replica's steps.
  CHECK(f.count(2, 'R') == 0);
  for (int i = 0; i < 3; ++i)
    CHECK(f.seen[static_cast<size_t>(i)]->size() == 6);
  CHECK(f.count(1, 'I') == 4);
}

TEST_CASE("schedulers not in lockstep send no idle plans") {
  lockstep_fixture f{false};
  f.submit(0, 1, 5);
  f.sched.run();
  CHECK(f.count(0, 'R') == 5);
  CHECK(f.seen[1]->empty());
}
