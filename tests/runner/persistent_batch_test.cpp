// runner::persistent_batch and runner::step_inbox: a shard's side of the step protocol. Block-table diffs build up
// whole tables step by step (new, appended, dropped, replaced after a re-admission; an append to a table the shard
// never got is an error) that the batch borrows instead of copying, and plans pair with the previous stage's
// handoffs in plan order, whichever comes first.
#include "runner/persistent_batch.hpp"
#include "runner/step_inbox.hpp"

#include <doctest/doctest.h>

using namespace actorllm;

namespace {

engine::step_plan plan_of(uint64_t step, std::vector<engine::scheduled_sequence> seqs,
                          std::vector<engine::seq_id> dropped = {}) {
  engine::step_plan p;
  p.step_id = step;
  int32_t row = 0;
  for (auto& s : seqs) {
    s.query_begin = row;
    row += s.n_query;
  }
  p.tokens.assign(static_cast<size_t>(row), 1);
  p.positions.assign(static_cast<size_t>(row), 0);
  p.sequences = std::move(seqs);
  p.dropped_seqs = std::move(dropped);
  p.sample_rows = {row - 1};
  return p;
}

TEST_CASE("persistent_batch builds whole block tables from the plans' diffs") {
  runner::persistent_batch b;
  const engine::seq_id a{1, 0}, a1{1, 1}, c{2, 0};
  // Step 1: a prefills (whole table); its sibling shares the full prompt block and has one of its own.
  REQUIRE(b.apply(plan_of(1, {{a, 0, 5, true, {3, 4}}, {a1, 0, 1, true, {3, 9}}})) == "");
  REQUIRE(b.batch().sequences.size() == 2);
  CHECK(b.batch().sequences[0].block_table == std::vector<int32_t>{3, 4});
  CHECK(b.batch().sequences[0].n_query == 5);
  CHECK(b.batch().sequences[1].block_table == std::vector<int32_t>{3, 9});
  CHECK(b.batch().sequences[1].query_begin == 5);
  CHECK(b.batch().n_tokens() == 6);
  // Step 2: a decodes with nothing new, the sibling appends a block, c arrives with a prefix-cache hit on block 3.
  REQUIRE(b.apply(plan_of(2, {{a, 0, 1, false, {}}, {a1, 0, 1, false, {11}}, {c, 0, 2, true, {3, 12}}})) == "");
  CHECK(b.batch().sequences[0].block_table == std::vector<int32_t>{3, 4});
  CHECK(b.batch().sequences[1].block_table == std::vector<int32_t>{3, 9, 11});
  CHECK(b.batch().sequences[2].block_table == std::vector<int32_t>{3, 12});
  CHECK(b.size() == 3);
  // Step 3: a is dropped (finished or preempted); c runs alone; the batch holds only what this plan scheduled.
  REQUIRE(b.apply(plan_of(3, {{c, 0, 1, false, {13}}}, {a})) == "");
  CHECK(b.size() == 2);
  CHECK(b.table(a) == nullptr);
  REQUIRE(b.batch().sequences.size() == 1);
  CHECK(b.batch().sequences[0].block_table == std::vector<int32_t>{3, 12, 13});
  // Step 4: a is re-admitted with a fresh whole table; dropped and re-sent in one plan works too.
  REQUIRE(b.apply(plan_of(4, {{a, 0, 6, true, {5, 6}}, {a1, 0, 1, true, {7}}}, {a1})) == "");
  CHECK(*b.table(a) == std::vector<int32_t>{5, 6});
  CHECK(*b.table(a1) == std::vector<int32_t>{7});
}

TEST_CASE("persistent_batch refuses blocks appended to a table it does not hold") {
  runner::persistent_batch b;
  const auto err = b.apply(plan_of(7, {{{4, 2}, 0, 1, false, {1}}}));
  CHECK(err.find("step 7") != std::string::npos);
  CHECK(err.find("4-2") != std::string::npos);
}

TEST_CASE("persistent_batch lends each table to the batch and takes it back: appended to, never copied") {
  runner::persistent_batch b;
  const engine::seq_id a{1, 0}, c{2, 0};
  REQUIRE(b.apply(plan_of(1, {{a, 0, 4, true, {3, 4}}, {c, 0, 2, true, {5}}})) == "");
  const int32_t* a_blocks = b.batch().sequences[0].block_table.data();
  CHECK(b.table(a) == &b.batch().sequences[0].block_table);  // lent: the batch holds it while the plan runs
  // Step 2: c first, then a: a's table is the same buffer in another place of the batch.
  REQUIRE(b.apply(plan_of(2, {{c, 0, 1, false, {}}, {a, 0, 1, false, {}}})) == "");
  CHECK(b.batch().sequences[1].block_table.data() == a_blocks);
  CHECK(b.batch().sequences[1].block_table == std::vector<int32_t>{3, 4});
  // Step 3: c alone: a's table is back with the shard, unchanged.
  REQUIRE(b.apply(plan_of(3, {{c, 0, 1, false, {6}}})) == "");
  REQUIRE(b.table(a) != nullptr);
  CHECK(b.table(a)->data() == a_blocks);
  CHECK(*b.table(a) == std::vector<int32_t>{3, 4});
  CHECK(*b.table(c) == std::vector<int32_t>{5, 6});
  // Step 4: a appends a block, and drops with c in the next plan.
  REQUIRE(b.apply(plan_of(4, {{a, 0, 1, false, {8}}})) == "");
  CHECK(b.batch().sequences[0].block_table == std::vector<int32_t>{3, 4, 8});
  REQUIRE(b.apply(plan_of(5, {}, {a, c})) == "");
  CHECK(b.size() == 0);
}

TEST_CASE("persistent_batch refuses a plan that schedules a sequence twice") {
  runner::persistent_batch b;
  const engine::seq_id a{1, 0};
  REQUIRE(b.apply(plan_of(1, {{a, 0, 4, true, {3}}})) == "");
  for (bool new_table : {false, true}) {
    CAPTURE(new_table);
    const auto err = b.apply(plan_of(2, {{a, 0, 1, false, {}}, {a, 0, 1, new_table, {3}}}));
    CHECK(err.find("schedules sequence 1-0 twice") != std::string::npos);
  }
}

std::shared_ptr<const engine::step_plan> plan_ptr(uint64_t step) {
  auto p = std::make_shared<engine::step_plan>();
  p->step_id = step;
  return p;
}

TEST_CASE("step_inbox hands plans out in order, each with its handoff, whichever arrived first") {
  runner::step_inbox in{true};
  CHECK(!in.next());
  in.push(plan_ptr(1));
  in.push(plan_ptr(2));  // two plans in flight (pp 2)
  CHECK(!in.next());     // step 1's hidden states are not in yet
  in.push(runner::stage_handoff{2, {}, {5}});
  CHECK(!in.next());  // step 2's handoff is in, but step 1 runs first
  in.push(runner::stage_handoff{1, {}, {4}});
  auto first = in.next();
  REQUIRE(first);
  CHECK(first->plan->step_id == 1);
  CHECK(first->handoff.expert_tokens == std::vector<uint64_t>{4});
  auto second = in.next();
  REQUIRE(second);
  CHECK(second->plan->step_id == 2);
  CHECK(second->handoff.step_id == 2);
  CHECK(!in.next());
  // A handoff ahead of its plan waits for it.
  in.push(runner::stage_handoff{3, {}, {}});
  CHECK(!in.next());
  CHECK(in.n_handoffs() == 1);
  in.push(plan_ptr(3));
  auto third = in.next();
  REQUIRE(third);
  CHECK(third->plan->step_id == 3);
  CHECK(in.n_handoffs() == 0);
  CHECK(in.n_plans() == 0);
}

TEST_CASE("step_inbox of a first stage (or a data-plane link) runs each plan at once") {
  runner::step_inbox in;
  in.push(plan_ptr(1));
  in.push(plan_ptr(2));
  CHECK(in.next()->plan->step_id == 1);
  CHECK(in.next()->plan->step_id == 2);
  CHECK(!in.next());
}

}  // namespace
