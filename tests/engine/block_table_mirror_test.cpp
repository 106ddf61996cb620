// engine::block_table_mirror: the diffs it hands out, and the diffs of scheduler_core's plans, rebuild every
// sequence's whole block table on a shard that applies them in plan order (engine::shard_tables, in the fake model),
// however the scheduler grows, shares, frees and re-admits tables (preemption, n > 1, prefix-cache hits, aborts while
// a plan is in flight, pp 2 with two plans in flight); finished sequences' tables are dropped by the next plan.
#include "engine/block_table_mirror.hpp"
#include "fake_model.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>

using namespace actorllm::engine;
using namespace actorllm::engine::test;

namespace {

constexpr int32_t vocab = 101;

TEST_CASE("block_table_mirror sends a new sequence whole, then only the blocks appended") {
  block_table_mirror m;
  const seq_id a{1, 0};
  auto first = m.update(a, std::vector<block_id>{4, 7});
  CHECK(first.new_table);
  CHECK(first.blocks == std::vector<block_id>{4, 7});
  auto same = m.update(a, std::vector<block_id>{4, 7});
  CHECK(!same.new_table);
  CHECK(same.blocks.empty());
  auto grown = m.update(a, std::vector<block_id>{4, 7, 9, 2});
  CHECK(!grown.new_table);
  CHECK(grown.blocks == std::vector<block_id>{9, 2});
  REQUIRE(m.table(a) != nullptr);
  CHECK(*m.table(a) == std::vector<block_id>{4, 7, 9, 2});
  CHECK(m.take_dropped().empty());
}

TEST_CASE("block_table_mirror resends a table that changed other than by appending, and drops forgotten ones") {
  block_table_mirror m;
  const seq_id a{1, 0}, b{2, 3};
  m.update(a, std::vector<block_id>{4, 7, 9});
  m.update(b, std::vector<block_id>{1});
  auto changed = m.update(a, std::vector<block_id>{4, 8});  // not an extension of {4, 7, 9}
  CHECK(changed.new_table);
  CHECK(changed.blocks == std::vector<block_id>{4, 8});
  m.forget(b);
  m.forget(seq_id{5, 0});  // never sent: nothing to drop
  CHECK(m.size() == 1);
  CHECK(m.table(b) == nullptr);
  CHECK(m.take_dropped() == std::vector<seq_id>{b});
  CHECK(m.take_dropped().empty());
  auto again = m.update(b, std::vector<block_id>{1, 6});  // re-admitted after a preemption: whole again
  CHECK(again.new_table);
  CHECK(again.blocks == std::vector<block_id>{1, 6});
}

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

/// Schedules one plan for a fresh request after everything finished: it drops every table the shards still hold (the
/// last plans' finished sequences), so that afterwards they hold only the new sequence's.
void check_last_drops(scheduler_core& s, driver& d, uint64_t id) {
  REQUIRE_FALSE(s.has_unfinished());
  std::set<seq_id> held;
  for (uint64_t r = 1; r <= id; ++r)
    for (uint32_t i = 0; i < 4; ++i)
      if (d.model.tables().table({r, i}))
        held.insert({r, i});
  add(s, make_request(id, 3, 1));
  auto plan = s.schedule();
  REQUIRE(plan);
  CHECK(std::set<seq_id>(plan->dropped_seqs.begin(), plan->dropped_seqs.end()) == held);
  d.track(std::move(*plan));
  REQUIRE(d.step());
  CHECK(d.model.tables().size() == 1);
  CHECK(d.model.tables().table({id, 0}) != nullptr);
  d.run_to_completion();
}

TEST_CASE("scheduler_core's block-table diffs rebuild the whole tables through preemption, n > 1 and prefix hits") {
  for (int32_t pp : {1, 2}) {
    CAPTURE(pp);
    scheduler_config cfg{.max_num_seqs = 8,
                         .max_num_batched_tokens = 24,
                         .block_size = 4,
                         .n_blocks = 24,
                         .max_model_len = 64,
                         .pp_size = pp};
    auto s = make_scheduler(cfg);
    driver d{s, vocab};  // the fake model checks each plan's tables against the scheduler's whole tables
    for (uint64_t id = 1; id <= 8; ++id)
      add(s, make_request(id, 5 + static_cast<int32_t>(id * 3 % 11), 24, id % 3 == 0 ? 3 : 1));
    d.run_to_completion();
    CHECK(s.n_preemptions() > 0);
    // A prompt computed before: the prefix cache hands its full blocks to the next request with it (and to the n
    // sequences of another).
    add(s, make_request(20, 13, 6, 1, 50));
    d.run_to_completion();
    add(s, make_request(21, 13, 6, 1, 50));
    add(s, make_request(22, 13, 6, 2, 50));
    d.run_to_completion();
    CHECK(s.prefix_cache_hits() > 0);
    CHECK(d.model.blocks_shipped < d.model.blocks_whole / 2);  // far fewer block ids than whole tables every step
    CHECK(d.model.new_tables > 0);
    check_last_drops(s, d, 23);
    CHECK(d.model.sampler_requests() == std::set<uint64_t>{23});  // the others' were released; 23's rides a next plan
  }
}

TEST_CASE("scheduler_core drops a sequence aborted while its plan is in flight, and its blocks go to another") {
  for (int32_t pp : {1, 2}) {
    CAPTURE(pp);
    scheduler_config cfg{.max_num_seqs = 8,
                         .max_num_batched_tokens = 32,
                         .block_size = 4,
                         .n_blocks = 12,
                         .max_model_len = 64,
                         .pp_size = pp};
    auto s = make_scheduler(cfg);
    driver d{s, vocab};
    add(s, make_request(1, 9, 30));
    add(s, make_request(2, 7, 30));
    REQUIRE(d.step());
    while (auto plan = s.schedule())
      d.track(std::move(*plan));
    REQUIRE(!d.in_flight.empty());  // with pp 1 as with pp 2, a plan holding both sequences is in flight now
    auto aborted = s.abort(1);
    REQUIRE(aborted.has_value());
    d.apply(*aborted);
    // A new request takes the freed blocks; the same id comes back as a new incarnation too.
    d.keep_history = true;
    add(s, make_request(3, 12, 10));
    d.finished.erase({1, 0});
    add(s, make_request(1, 5, 8));
    d.run_to_completion();
    // The first plan after the abort drops the old incarnation's table; the new one's is sent whole, no earlier.
    REQUIRE_FALSE(d.history.empty());
    const auto& first = d.history.front();
    CHECK(std::count(first.dropped_seqs.begin(), first.dropped_seqs.end(), seq_id{1, 0}) == 1);
    const scheduled_sequence* first_run = nullptr;
    for (const auto& plan : d.history)
      for (const auto& seq : plan.sequences)
        if (seq.seq == seq_id{1, 0} && !first_run)
          first_run = &seq;
    REQUIRE(first_run != nullptr);
    CHECK(first_run->new_table);
    check_last_drops(s, d, 4);
    CHECK(d.model.sampler_requests() == std::set<uint64_t>{4});
  }
}

}  // namespace

TEST_CASE("shard_tables drops before it applies a plan's tables, and refuses blocks for a table it never got") {
  shard_tables t;
  step_plan p;
  p.step_id = 1;
  p.sequences = {{seq_id{1, 0}, 0, 1, true, {4, 7}}, {seq_id{2, 0}, 1, 1, true, {1}}};
  REQUIRE(t.apply(p) == "");
  p.step_id = 2;
  p.sequences = {{seq_id{1, 0}, 0, 1, false, {9}}, {seq_id{2, 0}, 1, 1, true, {3, 5}}};  // 2 re-admitted whole
  p.dropped_seqs = {seq_id{2, 0}};
  REQUIRE(t.apply(p) == "");
  CHECK(*t.table({1, 0}) == std::vector<block_id>{4, 7, 9});
  CHECK(*t.table({2, 0}) == std::vector<block_id>{3, 5});
  p.step_id = 3;
  p.sequences = {{seq_id{3, 1}, 0, 1, false, {2}}};
  p.dropped_seqs = {seq_id{1, 0}};
  CHECK(t.apply(p) == "step 3 appends blocks to sequence 3-1, whose block table this shard does not hold");
  CHECK(t.table({1, 0}) == nullptr);
  CHECK(t.size() == 1);
}
