// The scheduler's side of the sampler shard's state (what the scheduler actor kept before the plan was the core's):
// each request's sampler setup rides the plan with its first sample or score row, a request that ends after its
// setup went out is released with the next plan, one that ends before is never introduced, and the sample row of
// every event names the row its token came from.
#include "engine/scheduler_core.hpp"

#include "fake_model.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

using namespace actorllm::engine;
using actorllm::engine::test::driver;
using actorllm::engine::test::make_scheduler;

namespace {

constexpr int32_t vocab = 101;

request make_request(uint64_t id, int32_t prompt_len, int32_t max_tokens, int32_t n = 1) {
  request r;
  r.id = id;
  for (int32_t i = 0; i < prompt_len; ++i)
    r.prompt.push_back((static_cast<int32_t>(id) * 31 + i * 7) % vocab);
  r.max_tokens = max_tokens;
  r.n = n;
  r.sampling.params.temperature = 0.5f + static_cast<float>(id);
  r.sampling.seed = 1000 + id;
  return r;
}

void add(scheduler_core& s, const request& r) {
  auto ok = s.add_request(r);
  REQUIRE_MESSAGE(ok.has_value(), (ok.has_value() ? "" : ok.error().message));
}

std::vector<uint64_t> setup_ids(const step_plan& plan) {
  std::vector<uint64_t> ids;
  for (const auto& s : plan.new_requests)
    ids.push_back(s.request_id);
  return ids;
}

scheduler_config config(int32_t max_num_batched_tokens = 64) {
  return scheduler_config{.max_num_seqs = 8,
                          .max_num_batched_tokens = max_num_batched_tokens,
                          .block_size = 4,
                          .n_blocks = 64,
                          .max_model_len = 64};
}

}  // namespace

TEST_CASE("scheduler: a request's sampler setup rides the plan of its first sample row, once") {
  auto s = make_scheduler(config(8));
  request r = make_request(1, 12, 3);
  r.sampling.params.repetition_penalty = 1.3f;  // the sampler needs the prompt
  add(s, r);
  add(s, make_request(2, 2, 3));  // no repetition penalty: no prompt ids
  // Request 1's prompt takes two chunks; request 2 waits for the budget.
  auto first = s.schedule();
  REQUIRE(first);
  CHECK(first->sample_seqs.empty());
  CHECK(first->new_requests.empty());  // no row of request 1 is sampled yet
  REQUIRE(s.update_from_output(first->step_id, std::vector<int32_t>{}).has_value());
  auto second = s.schedule();
  REQUIRE(second);
  REQUIRE(setup_ids(*second) == std::vector<uint64_t>{1, 2});
  const sampler_setup& one = second->new_requests[0];
  CHECK(one.spec == r.sampling);
  CHECK(one.prompt_ids == r.prompt);
  CHECK(one.resume_output_ids.empty());
  CHECK(second->new_requests[1].prompt_ids.empty());
  CHECK(second->new_requests[1].spec.seed == 1002);
  REQUIRE(s.update_from_output(second->step_id, std::vector<int32_t>(second->sample_seqs.size(), 5)).has_value());
  auto third = s.schedule();
  REQUIRE(third);
  CHECK(third->new_requests.empty());  // already introduced
  CHECK(third->released_requests.empty());
}

TEST_CASE("scheduler: a scored prompt introduces its request with its first score row, a resumed one its output") {
  auto s = make_scheduler(config(4));
  request r = make_request(1, 10, 4);
  r.score_prompt = true;
  r.sampling.params.prompt_logprobs = 0;
  add(s, r);
  auto first = s.schedule();  // positions 0..3: four score rows, no sample row
  REQUIRE(first);
  CHECK(first->sample_seqs.empty());
  CHECK(first->score_seqs.size() == 4);
  CHECK(setup_ids(*first) == std::vector<uint64_t>{1});

  auto t = make_scheduler(config());
  request resumed = make_request(2, 5, 6);
  resumed.resume_output = {7, 8};
  add(t, resumed);
  auto plan = t.schedule();
  REQUIRE(plan);
  REQUIRE(plan->new_requests.size() == 1);
  CHECK(plan->new_requests[0].resume_output_ids == std::vector<int32_t>{7, 8});
  CHECK(plan->n_tokens() == 7);  // the prompt and the output so far
}

TEST_CASE("scheduler: requests that end after their setup went out are released with the next plan, others never") {
  auto s = make_scheduler(config(8));
  add(s, make_request(1, 3, 2));
  add(s, make_request(2, 20, 4));  // its prompt outlasts the first plans
  auto first = s.schedule();
  REQUIRE(first);
  CHECK(setup_ids(*first) == std::vector<uint64_t>{1});  // 2 has no sample row yet
  // Both end while the plan is in flight: 1 was introduced, 2 was not.
  REQUIRE(s.abort(1).has_value());
  REQUIRE(s.abort(2).has_value());
  CHECK_FALSE(s.has_request(1));
  REQUIRE(s.update_from_output(first->step_id, std::vector<int32_t>{5}).has_value());
  add(s, make_request(3, 2, 2));
  auto next = s.schedule();
  REQUIRE(next);
  CHECK(next->released_requests == std::vector<uint64_t>{1});
  CHECK(setup_ids(*next) == std::vector<uint64_t>{3});
  // Ends of sequences whose request lives on release nothing; the request's end does, once.
  REQUIRE(s.update_from_output(next->step_id, std::vector<int32_t>{5}).has_value());
  auto events = s.abort_all();
  REQUIRE(events.size() == 1);
  CHECK(events[0].seq == seq_id{3, 0});
  CHECK(events[0].finished == finish_reason::abort);
  CHECK(events[0].sample_row == -1);
  add(s, make_request(4, 2, 2));
  auto last = s.schedule();
  REQUIRE(last);
  CHECK(last->released_requests == std::vector<uint64_t>{3});
  CHECK(std::count(last->dropped_seqs.begin(), last->dropped_seqs.end(), seq_id{3, 0}) == 1);
}

TEST_CASE("scheduler: events name their sample rows, also for the n sequences of one prompt row") {
  auto s = make_scheduler(config());
  add(s, make_request(1, 5, 3));
  add(s, make_request(2, 6, 3, /*n=*/3));
  auto plan = s.schedule();
  REQUIRE(plan);
  REQUIRE(plan->sample_seqs == std::vector<seq_id>{{1, 0}, {2, 0}, {2, 1}, {2, 2}});
  CHECK(plan->sample_rows[1] == plan->sample_rows[2]);  // the siblings share sequence 0's prompt row
  REQUIRE(s.abort(1).has_value());                      // its row's token is dropped: no event for it
  auto events = s.update_from_output(plan->step_id, std::vector<int32_t>{10, 11, 12, 13});
  REQUIRE(events.has_value());
  REQUIRE(events->size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK((*events)[i].seq == seq_id{2, static_cast<uint32_t>(i)});
    CHECK((*events)[i].sample_row == static_cast<int32_t>(i + 1));
    CHECK((*events)[i].new_token == 11 + static_cast<int32_t>(i));
  }
}

TEST_CASE("scheduler: the sampler bookkeeping balances over a run with aborts, and abort_all ends everything") {
  for (int32_t pp : {1, 2}) {
    CAPTURE(pp);
    scheduler_config cfg = config(16);
    cfg.pp_size = pp;
    cfg.n_blocks = 16;
    auto s = make_scheduler(cfg);
    driver d{s, vocab};  // the fake model checks every sampled request was set up, and releases match setups
    for (uint64_t id = 1; id <= 10; ++id)
      add(s, make_request(id, 3 + static_cast<int32_t>(id % 7), 6, id % 4 == 0 ? 2 : 1));
    for (int i = 0; i < 6; ++i)
      REQUIRE(d.step());
    for (uint64_t id : {3, 9})
      if (auto aborted = s.abort(id))  // unless it finished already
        d.apply(*aborted);
    d.run_to_completion();
    add(s, make_request(11, 4, 20));
    add(s, make_request(12, 4, 20));
    REQUIRE(d.step());
    auto events = s.abort_all();
    CHECK(events.size() == 2);
    CHECK(events.front().seq.request_id == 11);  // in request id order
    d.apply(events);
    CHECK_FALSE(s.has_unfinished());
    add(s, make_request(13, 2, 1));
    d.run_to_completion();
    CHECK(d.model.sampler_requests() == std::set<uint64_t>{13});  // 13's release waits for a next plan
  }
}
