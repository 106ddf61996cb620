// engine::block_table_mirror: the diffs it hands out rebuild every sequence's whole block table on a shard that
// applies them in plan order, however the scheduler grows, shares, frees and re-admits tables (preemption, n > 1,
// prefix-cache hits, aborts while a plan is in flight, pp 2 with two plans in flight).
#include "engine/block_table_mirror.hpp"
#include "fake_model.hpp"

#include <doctest/doctest.h>

#include <deque>
#include <map>

using namespace actorllm::engine;
using namespace actorllm::engine::test;

namespace {

constexpr int32_t vocab = 101;

TEST_CASE("block_table_mirror sends a new sequence whole, then only the blocks appended") {
  block_table_mirror m;
  const seq_id a{1, 0};
  auto first = m.update(a, {4, 7});
  CHECK(first.new_table);
  CHECK(first.blocks == std::vector<block_id>{4, 7});
  auto same = m.update(a, {4, 7});
  CHECK(!same.new_table);
  CHECK(same.blocks.empty());
  auto grown = m.update(a, {4, 7, 9, 2});
  CHECK(!grown.new_table);
  CHECK(grown.blocks == std::vector<block_id>{9, 2});
  REQUIRE(m.table(a) != nullptr);
  CHECK(*m.table(a) == std::vector<block_id>{4, 7, 9, 2});
  CHECK(m.take_dropped().empty());
}

TEST_CASE("block_table_mirror resends a table that changed other than by appending, and drops forgotten ones") {
  block_table_mirror m;
  const seq_id a{1, 0}, b{2, 3};
  m.update(a, {4, 7, 9});
  m.update(b, {1});
  auto changed = m.update(a, {4, 8});  // not an extension of {4, 7, 9}
  CHECK(changed.new_table);
  CHECK(changed.blocks == std::vector<block_id>{4, 8});
  m.forget(b);
  m.forget(seq_id{5, 0});  // never sent: nothing to drop
  CHECK(m.size() == 1);
  CHECK(m.table(b) == nullptr);
  CHECK(m.take_dropped() == std::vector<seq_id>{b});
  CHECK(m.take_dropped().empty());
  auto again = m.update(b, {1, 6});  // re-admitted after a preemption: whole again
  CHECK(again.new_table);
  CHECK(again.blocks == std::vector<block_id>{1, 6});
}

// A shard's copy of the tables, built from nothing but the diffs, applied in plan order.
struct shard_tables {
  std::map<seq_id, std::vector<block_id>> tables;

  void apply(const std::vector<seq_id>& dropped, const std::vector<std::pair<seq_id, table_delta>>& deltas) {
    for (seq_id s : dropped)
      tables.erase(s);
    for (const auto& [seq, d] : deltas) {
      if (d.new_table) {
        tables[seq] = d.blocks;
      } else {
        REQUIRE_MESSAGE(tables.contains(seq), to_string(seq), " extended but never sent");
        tables[seq].insert(tables[seq].end(), d.blocks.begin(), d.blocks.end());
      }
    }
  }
};

// What one plan told the shards, and the whole tables it stood for.
struct sent_plan {
  std::vector<seq_id> dropped;
  std::vector<std::pair<seq_id, table_delta>> deltas;
  std::vector<std::vector<block_id>> whole;
};

// Drives the scheduler as the scheduler actor does (diffs at dispatch, forget on every finished or preempted
// sequence), while the shard applies each plan only when it runs it: with pp 2, one plan behind the dispatches.
struct mirrored_run {
  scheduler_core& sched;
  driver d;
  block_table_mirror mirror;
  shard_tables shard;
  std::deque<sent_plan> sent;
  size_t shipped = 0, whole = 0, new_tables = 0;

  mirrored_run(scheduler_core& s) : sched(s), d(s, vocab) {}

  void forget_finished(const std::vector<seq_event>& events) {
    for (const auto& e : events)
      if (e.finished)
        mirror.forget(e.seq);
    d.apply(events);
  }

  /// Schedules plans until the scheduler has as many in flight as it allows; none of them runs.
  void dispatch() {
    while (auto plan = sched.schedule()) {
      sent_plan p;
      for (seq_id s : plan->preempted)
        mirror.forget(s);
      for (size_t i = 0; i < plan->batch.sequences.size(); ++i) {
        const auto& table = plan->batch.sequences[i].block_table;
        p.deltas.emplace_back(plan->batch_seqs[i], mirror.update(plan->batch_seqs[i], table));
        p.whole.push_back(table);
        shipped += p.deltas.back().second.blocks.size();
        whole += table.size();
        new_tables += p.deltas.back().second.new_table ? 1 : 0;
      }
      p.dropped = mirror.take_dropped();
      sent.push_back(std::move(p));
      d.track(std::move(*plan));
    }
  }

  /// dispatch(), then runs the oldest plan in flight; false when there is none.
  bool step() {
    dispatch();
    if (d.in_flight.empty())
      return false;
    // The shard runs the oldest plan: its tables must be the scheduler's whole tables of that moment.
    sent_plan p = std::move(sent.front());
    sent.pop_front();
    shard.apply(p.dropped, p.deltas);
    for (size_t i = 0; i < p.deltas.size(); ++i) {
      CAPTURE(to_string(p.deltas[i].first));
      CHECK(shard.tables.at(p.deltas[i].first) == p.whole[i]);
    }
    step_plan plan = std::move(d.in_flight.front().plan);
    d.in_flight.pop_front();
    auto events = sched.update_from_output(plan.step_id, d.model.run(plan));
    REQUIRE(events.has_value());
    forget_finished(*events);
    return true;
  }

  void run_to_completion() {
    int steps = 0;
    while (sched.has_unfinished() || !d.in_flight.empty()) {
      REQUIRE(++steps < 100000);
      REQUIRE(step());
    }
  }
};

request make_request(uint64_t id, int32_t prompt_len, int32_t max_tokens, int32_t n = 1, int32_t seed = -1) {
  request r;
  r.id = id;
  r.prompt.resize(static_cast<size_t>(prompt_len));
  for (int32_t i = 0; i < prompt_len; ++i)
    r.prompt[static_cast<size_t>(i)] = ((seed < 0 ? static_cast<int32_t>(id) : seed) * 31 + i * 7) % vocab;
  r.max_tokens = max_tokens;
  r.n = n;
  return r;
}

void add(scheduler_core& s, const request& r) {
  auto ok = s.add_request(r);
  REQUIRE_MESSAGE(ok.has_value(), (ok.has_value() ? "" : ok.error().message));
}

TEST_CASE("block_table_mirror diffs rebuild the whole tables through preemption, n > 1 and prefix-cache hits") {
  for (int32_t pp : {1, 2}) {
    CAPTURE(pp);
    scheduler_config cfg{.max_num_seqs = 8,
                         .max_num_batched_tokens = 24,
                         .block_size = 4,
                         .n_blocks = 24,
                         .max_model_len = 64,
                         .pp_size = pp};
    auto s = make_scheduler(cfg);
    mirrored_run run{s};
    for (uint64_t id = 1; id <= 8; ++id)
      add(s, make_request(id, 5 + static_cast<int32_t>(id * 3 % 11), 24, id % 3 == 0 ? 3 : 1));
    run.run_to_completion();
    CHECK(s.n_preemptions() > 0);
    // A prompt computed before: the prefix cache hands its full blocks to the next request with it (and to the n
    // sequences of another).
    add(s, make_request(20, 13, 6, 1, 50));
    run.run_to_completion();
    add(s, make_request(21, 13, 6, 1, 50));
    add(s, make_request(22, 13, 6, 2, 50));
    run.run_to_completion();
    CHECK(s.prefix_cache_hits() > 0);
    CHECK(run.mirror.size() == 0);                   // every sequence ended
    run.shard.apply(run.mirror.take_dropped(), {});  // the last drops ride the next plan
    CHECK(run.shard.tables.empty());
    CHECK(run.shipped < run.whole / 2);  // far fewer block ids than whole tables every step
    CHECK(run.new_tables > 0);
  }
}

TEST_CASE("block_table_mirror forgets a sequence aborted while its plan is in flight, its blocks go to another") {
  for (int32_t pp : {1, 2}) {
    CAPTURE(pp);
    scheduler_config cfg{.max_num_seqs = 8,
                         .max_num_batched_tokens = 32,
                         .block_size = 4,
                         .n_blocks = 12,
                         .max_model_len = 64,
                         .pp_size = pp};
    auto s = make_scheduler(cfg);
    mirrored_run run{s};
    add(s, make_request(1, 9, 30));
    add(s, make_request(2, 7, 30));
    REQUIRE(run.step());
    run.dispatch();  // with pp 1 as with pp 2, a plan holding both sequences is in flight now
    REQUIRE(!run.d.in_flight.empty());
    auto aborted = s.abort(1);
    REQUIRE(aborted.has_value());
    run.forget_finished(*aborted);
    CHECK(run.mirror.table({1, 0}) == nullptr);
    // A new request takes the freed blocks; the same id comes back as a new incarnation too.
    add(s, make_request(3, 12, 10));
    run.d.finished.erase({1, 0});
    add(s, make_request(1, 5, 8));
    run.run_to_completion();
    CHECK(run.mirror.size() == 0);
    run.shard.apply(run.mirror.take_dropped(), {});
    CHECK(run.shard.tables.empty());
  }
}

}  // namespace
