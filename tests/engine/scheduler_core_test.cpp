// The scheduler state machine, driven with a fake deterministic model (fake_model.hpp): chunked prefill under the
// token and sequence budgets, decodes before prefills, policy order, preemption by recompute, abort, n > 1 sharing,
// pipelined plans, stop conditions and admission errors.
#include "engine/scheduler_core.hpp"

#include "fake_model.hpp"

#include <doctest/doctest.h>

#include <numeric>
#include <string>
#include <vector>

using namespace actorllm::engine;
using actorllm::engine::test::driver;
using actorllm::engine::test::make_scheduler;
using actorllm::engine::test::run_alone;
using actorllm::engine::test::scheduled_seqs;

namespace {

constexpr int32_t vocab = 101;

std::vector<int32_t> prompt_of(int32_t length, int32_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(length));
  for (int32_t i = 0; i < length; ++i)
    p[static_cast<size_t>(i)] = (seed * 31 + i * 7) % vocab;
  return p;
}

request make_request(uint64_t id, int32_t prompt_len, int32_t max_tokens, int32_t n = 1, int32_t priority = 0) {
  request r;
  r.id = id;
  r.prompt = prompt_of(prompt_len, static_cast<int32_t>(id));
  r.max_tokens = max_tokens;
  r.n = n;
  r.priority = priority;
  return r;
}

void add(scheduler_core& s, const request& r) {
  auto ok = s.add_request(r);
  REQUIRE_MESSAGE(ok.has_value(), (ok.has_value() ? "" : ok.error().message));
}

/// Every sequence of every request produced what it produces alone, with the same finish reason.
void check_outputs_match_alone(const driver& d, const std::vector<request>& reqs, int32_t max_model_len,
                               bool salted = true) {
  for (const request& r : reqs)
    for (int32_t i = 0; i < r.n; ++i) {
      seq_id id{r.id, static_cast<uint32_t>(i)};
      auto ref = run_alone(r, static_cast<uint32_t>(i), max_model_len, vocab, salted);
      CAPTURE(to_string(id));
      REQUIRE(d.outputs.contains(id));
      CHECK(d.outputs.at(id) == ref.output);
      REQUIRE(d.finished.contains(id));
      CHECK(d.finished.at(id) == ref.reason);
    }
}

}  // namespace

TEST_CASE("scheduler splits a long prompt into chunks of at most max_num_batched_tokens") {
  scheduler_config cfg{
      .max_num_seqs = 4, .max_num_batched_tokens = 32, .block_size = 16, .n_blocks = 64, .max_model_len = 256};
  auto s = make_scheduler(cfg);
  request r = make_request(1, 100, 5);
  add(s, r);
  std::vector<int32_t> chunks;
  for (int i = 0; i < 4; ++i) {
    auto plan = s.schedule();
    REQUIRE(plan);
    CHECK(s.schedule() == std::nullopt);  // pp_size 1: nothing more until the result arrives
    REQUIRE(plan->sequences.size() == 1);
    const auto& seq = plan->sequences[0];
    chunks.push_back(seq.n_query);
    CHECK(plan->positions.front() == 32 * i);
    // Blocks are reserved for the tokens scheduled so far, no more; the shards get the table whole once, then the
    // blocks each chunk adds.
    const size_t n_blocks = static_cast<size_t>((32 * i + seq.n_query + 15) / 16);
    CHECK(s.allocator().block_table(seq_id{1, 0}).size() == n_blocks);
    CHECK(seq.new_table == (i == 0));
    CHECK(seq.blocks.size() == n_blocks - static_cast<size_t>((32 * i + 15) / 16));
    CHECK(plan->sample_rows.size() == (i == 3 ? 1u : 0u));
    auto events = s.update_from_output(plan->step_id, std::vector<int32_t>(plan->sample_seqs.size(), 5));
    REQUIRE(events.has_value());
    CHECK(events->size() == (i == 3 ? 1u : 0u));
  }
  CHECK(chunks == std::vector<int32_t>{32, 32, 32, 4});
  CHECK(s.allocator().n_tokens(seq_id{1, 0}) == 100);
  auto decode = s.schedule();
  REQUIRE(decode);
  CHECK(decode->tokens == std::vector<int32_t>{5});
  CHECK(decode->positions == std::vector<int32_t>{100});
}

TEST_CASE("scheduler admits at most max_num_seqs sequences and keeps the rest waiting") {
  scheduler_config cfg{
      .max_num_seqs = 2, .max_num_batched_tokens = 512, .block_size = 4, .n_blocks = 64, .max_model_len = 64};
  auto s = make_scheduler(cfg);
  std::vector<request> reqs;
  for (uint64_t id = 1; id <= 5; ++id) {
    reqs.push_back(make_request(id, 6, 4));
    add(s, reqs.back());
  }
  driver d(s, vocab);
  while (s.has_unfinished()) {
    REQUIRE(d.step());
    CHECK(s.n_running() <= 2);
  }
  check_outputs_match_alone(d, reqs, cfg.max_model_len);
  CHECK(s.allocator().n_free_blocks() == cfg.n_blocks);
}

TEST_CASE("scheduler runs decodes before prefill chunks and gives them the token budget first") {
  scheduler_config cfg{
      .max_num_seqs = 8, .max_num_batched_tokens = 8, .block_size = 4, .n_blocks = 64, .max_model_len = 128};
  auto s = make_scheduler(cfg);
  for (uint64_t id = 1; id <= 3; ++id)
    add(s, make_request(id, 2, 20));
  auto first = s.schedule();  // three prompts of 2 tokens
  REQUIRE(first);
  CHECK(first->n_tokens() == 6);
  REQUIRE(s.update_from_output(first->step_id, std::vector<int32_t>{1, 2, 3}).has_value());

  add(s, make_request(4, 20, 5));  // a long prompt arrives while the three decode
  auto plan = s.schedule();
  REQUIRE(plan);
  REQUIRE(plan->sequences.size() == 4);
  for (int i = 0; i < 3; ++i) {
    CHECK(scheduled_seqs(*plan)[static_cast<size_t>(i)] == seq_id{static_cast<uint64_t>(i + 1), 0});
    CHECK(plan->sequences[static_cast<size_t>(i)].n_query == 1);
    CHECK(plan->positions[static_cast<size_t>(i)] == 2);
  }
  CHECK(scheduled_seqs(*plan)[3] == seq_id{4, 0});
  CHECK(plan->sequences[3].n_query == 5);  // what the decodes left of the budget of 8
  CHECK(plan->n_tokens() == 8);
  CHECK(plan->sample_seqs == std::vector<seq_id>{{1, 0}, {2, 0}, {3, 0}});

  // The partly prefilled prompt is running now, and still comes after the decodes.
  REQUIRE(s.update_from_output(plan->step_id, std::vector<int32_t>{1, 2, 3}).has_value());
  auto next = s.schedule();
  REQUIRE(next);
  CHECK(scheduled_seqs(*next) == std::vector<seq_id>{{1, 0}, {2, 0}, {3, 0}, {4, 0}});
  CHECK(next->positions == std::vector<int32_t>{3, 3, 3, 5, 6, 7, 8, 9});
}

TEST_CASE("scheduler admits in arrival order under fcfs and by priority value under priority") {
  auto admission_order = [](scheduling_policy policy) {
    scheduler_config cfg{.max_num_seqs = 1,
                         .max_num_batched_tokens = 64,
                         .block_size = 4,
                         .n_blocks = 32,
                         .max_model_len = 64,
                         .policy = policy};
    auto s = make_scheduler(cfg);
    const int32_t priorities[] = {5, 1, 3, 1};
    for (uint64_t id = 1; id <= 4; ++id)
      add(s, make_request(id, 3, 2, 1, priorities[id - 1]));
    driver d(s, vocab);
    d.keep_history = true;
    d.run_to_completion();
    std::vector<uint64_t> order;
    for (const auto& plan : d.history)
      for (size_t i = 0; i < scheduled_seqs(plan).size(); ++i)
        if (plan.positions[static_cast<size_t>(plan.sequences[i].query_begin)] == 0)
          order.push_back(scheduled_seqs(plan)[i].request_id);
    return order;
  };
  CHECK(admission_order(scheduling_policy::fcfs) == std::vector<uint64_t>{1, 2, 3, 4});
  CHECK(admission_order(scheduling_policy::priority) == std::vector<uint64_t>{2, 4, 3, 1});
}

TEST_CASE("scheduler preempts the last sequence in policy order when blocks run out") {
  // Two sequences of 4 prompt tokens fill 2 of 3 blocks; the first decode step needs a block for each.
  auto victim = [](scheduling_policy policy) {
    scheduler_config cfg{.max_num_seqs = 4,
                         .max_num_batched_tokens = 64,
                         .block_size = 4,
                         .n_blocks = 3,
                         .max_model_len = 12,
                         .policy = policy};
    auto s = make_scheduler(cfg);
    add(s, make_request(1, 4, 4, 1, /*priority=*/9));
    add(s, make_request(2, 4, 4, 1, /*priority=*/0));
    auto prefill = s.schedule();
    REQUIRE(prefill);
    REQUIRE(scheduled_seqs(*prefill).size() == 2);
    REQUIRE(s.update_from_output(prefill->step_id, std::vector<int32_t>{7, 7}).has_value());
    auto plan = s.schedule();
    REQUIRE(plan);
    CHECK(s.n_preemptions() == 1);
    REQUIRE(plan->dropped_seqs.size() == 1);  // the shards drop the victim's table
    CHECK(scheduled_seqs(*plan).size() == 1);
    CHECK(scheduled_seqs(*plan)[0] != plan->dropped_seqs[0]);
    CHECK(s.n_waiting() == 1);
    CHECK(s.allocator().n_free_blocks() == 1);  // the victim's block went back; the survivor took one more
    CHECK(s.check_invariants() == "");
    return plan->dropped_seqs[0].request_id;
  };
  CHECK(victim(scheduling_policy::fcfs) == 2);      // latest arrival
  CHECK(victim(scheduling_policy::priority) == 1);  // highest priority value
}

TEST_CASE("scheduler completes every sequence with its solo output when the cache forces preemption") {
  for (int32_t pp : {1, 2}) {
    CAPTURE(pp);
    scheduler_config cfg{.max_num_seqs = 8,
                         .max_num_batched_tokens = 24,
                         .block_size = 4,
                         .n_blocks = 14,
                         .max_model_len = 64,
                         .pp_size = pp};
    auto s = make_scheduler(cfg);
    std::vector<request> reqs;
    for (uint64_t id = 1; id <= 8; ++id) {
      reqs.push_back(make_request(id, 5 + static_cast<int32_t>(id * 3 % 11), 24));
      reqs.back().eos_token_ids = {100};
      add(s, reqs.back());
    }
    driver d(s, vocab);
    d.run_to_completion();
    CHECK(s.n_preemptions() > 0);
    check_outputs_match_alone(d, reqs, cfg.max_model_len);
    CHECK(s.allocator().n_free_blocks() == cfg.n_blocks);
    CHECK(s.kv_cache_usage() == 0.0);
    CHECK(s.n_running() == 0);
    CHECK(s.n_waiting() == 0);
    CHECK(d.finished_requests.size() == reqs.size());
  }
}

TEST_CASE("scheduler plans each prompt position of a scored request once, through chunks and preemptions") {
  for (int32_t pp : {1, 2}) {
    CAPTURE(pp);
    scheduler_config cfg{.max_num_seqs = 8,
                         .max_num_batched_tokens = 24,
                         .block_size = 4,
                         .n_blocks = 14,
                         .max_model_len = 64,
                         .pp_size = pp,
                         .enable_prefix_caching = true};
    auto s = make_scheduler(cfg);
    std::vector<request> reqs;
    for (uint64_t id = 1; id <= 8; ++id) {
      reqs.push_back(make_request(id, 5 + static_cast<int32_t>(id * 3 % 11), 24, id == 3 ? 2 : 1));
      reqs.back().eos_token_ids = {100};
      reqs.back().score_prompt = id % 2 == 1;  // half of them
      add(s, reqs.back());
    }
    driver d(s, vocab);
    d.run_to_completion();
    CHECK(s.n_preemptions() > 0);
    check_outputs_match_alone(d, reqs, cfg.max_model_len);  // scoring changes no output
    for (const request& r : reqs) {
      CAPTURE(r.id);
      const auto it = d.scores.find(seq_id{r.id, 0});
      if (!r.score_prompt) {
        CHECK(it == d.scores.end());
        continue;
      }
      REQUIRE(it != d.scores.end());
      std::vector<std::pair<int32_t, int32_t>> want;
      for (size_t p = 0; p + 1 < r.prompt.size(); ++p)
        want.emplace_back(static_cast<int32_t>(p), r.prompt[p + 1]);
      CHECK(it->second == want);                        // each position once, in order, its next token
      CHECK_FALSE(d.scores.contains(seq_id{r.id, 1}));  // a fork shares the prompt: scored by sequence 0 only
    }
  }
}

TEST_CASE("scheduler abort frees blocks at once, also while the sequence is in a plan in flight") {
  scheduler_config cfg{.max_num_seqs = 8,
                       .max_num_batched_tokens = 64,
                       .block_size = 4,
                       .n_blocks = 32,
                       .max_model_len = 64,
                       .pp_size = 2};
  auto s = make_scheduler(cfg);
  add(s, make_request(1, 10, 8));  // 3 blocks
  add(s, make_request(2, 6, 8));   // 2 blocks
  add(s, make_request(3, 5, 8));   // 2 blocks
  auto plan = s.schedule();
  REQUIRE(plan);
  REQUIRE(scheduled_seqs(*plan).size() == 3);
  CHECK(s.allocator().n_free_blocks() == 32 - 3 - 2 - 2);

  auto events = s.abort(1);
  REQUIRE(events.has_value());
  REQUIRE(events->size() == 1);
  CHECK((*events)[0].seq == seq_id{1, 0});
  CHECK((*events)[0].finished == finish_reason::abort);
  CHECK((*events)[0].request_finished);
  CHECK(s.allocator().n_free_blocks() == 32 - 2 - 2);
  CHECK(s.check_invariants() == "");

  // The late result for the aborted sequence is dropped; the others get theirs.
  auto late = s.update_from_output(plan->step_id, std::vector<int32_t>{11, 12, 13});
  REQUIRE(late.has_value());
  REQUIRE(late->size() == 2);
  CHECK((*late)[0].seq == seq_id{2, 0});
  CHECK((*late)[0].new_token == 12);
  CHECK((*late)[1].seq == seq_id{3, 0});

  // The id of an aborted request may come back while a plan still holds its old sequence: the old result must not
  // reach the new incarnation.
  auto reused = s.schedule();  // 2 and 3 decode
  REQUIRE(reused);
  REQUIRE(s.abort(3).has_value());
  request again3 = make_request(3, 4, 8);
  again3.prompt = {50, 51, 52, 53};
  add(s, again3);
  auto fresh = s.schedule();  // the new request 3 prefills while the old plan is still in flight
  REQUIRE(fresh);
  CHECK(scheduled_seqs(*fresh) == std::vector<seq_id>{{3, 0}});
  auto stale = s.update_from_output(reused->step_id, std::vector<int32_t>{21, 22});
  REQUIRE(stale.has_value());
  REQUIRE(stale->size() == 1);
  CHECK((*stale)[0].seq == seq_id{2, 0});
  CHECK(s.tokens(seq_id{3, 0}).size() == 4);
  CHECK(s.n_in_flight() == 1);
  auto fresh_events = s.update_from_output(fresh->step_id, std::vector<int32_t>{60});
  REQUIRE(fresh_events.has_value());
  REQUIRE(fresh_events->size() == 1);
  CHECK((*fresh_events)[0].new_token == 60);
  CHECK(s.check_invariants() == "");

  // A waiting request's abort frees nothing but removes it.
  add(s, make_request(4, 5, 8));
  CHECK(s.n_waiting() == 1);
  REQUIRE(s.abort(4).has_value());
  CHECK(s.n_waiting() == 0);
  auto again = s.abort(4);
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().code == engine_errc::unknown_request);

  // The engine's detokenizer found a stop string: finishing a sequence frees its blocks at once.
  auto before = s.allocator().n_free_blocks();
  auto fin = s.finish_sequence(seq_id{2, 0}, finish_reason::stop);
  REQUIRE(fin.has_value());
  CHECK((*fin)[0].finished == finish_reason::stop);
  CHECK(s.allocator().n_free_blocks() == before + 2);
  CHECK(s.check_invariants() == "");
}

TEST_CASE("scheduler shares the prompt's blocks between the n sequences of a request") {
  scheduler_config cfg{
      .max_num_seqs = 8, .max_num_batched_tokens = 64, .block_size = 16, .n_blocks = 32, .max_model_len = 128};
  auto s = make_scheduler(cfg);
  request r = make_request(9, 40, 12, /*n=*/3);  // 2 full blocks + a partial one
  add(s, r);
  CHECK(s.n_waiting() == 1);  // the siblings exist only once the prompt is scheduled

  driver d(s, vocab);
  auto prefill = s.schedule();
  REQUIRE(prefill);
  CHECK(prefill->n_tokens() == 40);  // the prompt is computed once
  CHECK(prefill->sample_seqs == std::vector<seq_id>{{9, 0}, {9, 1}, {9, 2}});
  CHECK(prefill->sample_rows == std::vector<int32_t>{39, 39, 39});
  CHECK(s.n_running() == 3);
  CHECK(s.allocator().n_free_blocks() == 32 - 3);  // not 3 x 3
  REQUIRE(prefill->sequences[0].new_table);
  const auto& parent_table = prefill->sequences[0].blocks;
  for (uint32_t i = 1; i < 3; ++i) {
    auto t = s.allocator().block_table(seq_id{9, i});
    // The full blocks only: the partial one is sequence 0's, which writes into it.
    CHECK(std::vector<int32_t>(t.begin(), t.end()) ==
          std::vector<int32_t>(parent_table.begin(), parent_table.begin() + 2));
  }
  d.apply(*s.update_from_output(prefill->step_id, d.model.run(*prefill)));

  // First decode: sequence 0 decodes; each sibling recomputes the 8 prompt tokens of the partial block with its first
  // token, into a block of its own (nothing is copied). The full blocks stay shared for good.
  auto decode = s.schedule();
  REQUIRE(decode);
  CHECK(scheduled_seqs(*decode).size() == 3);
  CHECK(decode->n_tokens() == 1 + 9 + 9);
  CHECK(s.allocator().n_free_blocks() == 32 - 5);
  CHECK(s.allocator().ref_count(prefill->sequences[0].blocks[0]) == 3);
  d.apply(*s.update_from_output(decode->step_id, d.model.run(*decode)));

  d.run_to_completion();
  check_outputs_match_alone(d, {r}, cfg.max_model_len);
  // The seq-dependent part of the fake model is the only thing that tells them apart.
  CHECK(d.outputs.at({9, 0}) != d.outputs.at({9, 1}));
  CHECK(s.allocator().n_free_blocks() == cfg.n_blocks);
  CHECK(d.finished_requests == std::vector<uint64_t>{9});
}

TEST_CASE("scheduler gives the n sequences identical outputs when the model ignores which sequence it is") {
  scheduler_config cfg{
      .max_num_seqs = 4, .max_num_batched_tokens = 8, .block_size = 4, .n_blocks = 12, .max_model_len = 48};
  auto s = make_scheduler(cfg);
  request r = make_request(3, 13, 20, /*n=*/4);  // chunked prompt, tight cache: siblings get preempted too
  add(s, r);
  driver d(s, vocab, /*salted=*/false);
  d.run_to_completion();
  for (uint32_t i = 1; i < 4; ++i)
    CHECK(d.outputs.at({3, i}) == d.outputs.at({3, 0}));
  check_outputs_match_alone(d, {r}, cfg.max_model_len, /*salted=*/false);
  CHECK(s.n_preemptions() > 0);
  CHECK(s.allocator().n_free_blocks() == cfg.n_blocks);
}

TEST_CASE("scheduler with pp_size 2 keeps two plans in flight over disjoint sequences") {
  scheduler_config cfg{.max_num_seqs = 8,
                       .max_num_batched_tokens = 16,
                       .block_size = 4,
                       .n_blocks = 64,
                       .max_model_len = 64,
                       .pp_size = 2};
  auto s = make_scheduler(cfg);
  std::vector<request> reqs;
  for (uint64_t id = 1; id <= 4; ++id) {
    reqs.push_back(make_request(id, 8, 6));
    add(s, reqs.back());
  }
  auto a = s.schedule();
  auto b = s.schedule();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(scheduled_seqs(*a) == std::vector<seq_id>{{1, 0}, {2, 0}});
  CHECK(scheduled_seqs(*b) == std::vector<seq_id>{{3, 0}, {4, 0}});
  CHECK(a->step_id != b->step_id);
  CHECK(s.n_in_flight() == 2);
  CHECK(s.schedule() == std::nullopt);

  // Results arrive oldest first; only plan a's sequences can run again before b's result is in.
  driver d(s, vocab);
  d.apply(*s.update_from_output(a->step_id, d.model.run(*a)));
  auto c = s.schedule();
  REQUIRE(c);
  CHECK(scheduled_seqs(*c) == std::vector<seq_id>{{1, 0}, {2, 0}});
  CHECK(s.schedule() == std::nullopt);
  d.apply(*s.update_from_output(b->step_id, d.model.run(*b)));  // the model runs plans in order: a, b, c
  d.track(*c);
  d.run_to_completion();
  check_outputs_match_alone(d, reqs, cfg.max_model_len);
  CHECK(s.allocator().n_free_blocks() == cfg.n_blocks);
}

TEST_CASE("scheduler finishes sequences on eos, stop token ids, min_tokens, max_tokens and max_model_len") {
  scheduler_config cfg{
      .max_num_seqs = 4, .max_num_batched_tokens = 64, .block_size = 4, .n_blocks = 16, .max_model_len = 10};
  auto s = make_scheduler(cfg);
  // Feeds `tokens` one step at a time to request `id` alone; returns the finish reason and the step it came at.
  auto feed = [&](request r, std::vector<int32_t> tokens) -> std::pair<std::optional<finish_reason>, size_t> {
    add(s, r);
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto plan = s.schedule();
      REQUIRE(plan);
      auto events = s.update_from_output(plan->step_id, std::vector<int32_t>{tokens[i]});
      REQUIRE(events.has_value());
      REQUIRE(events->size() == 1);
      CHECK((*events)[0].new_token == tokens[i]);
      if ((*events)[0].finished) {
        CHECK((*events)[0].request_finished);
        CHECK(s.allocator().n_free_blocks() == cfg.n_blocks);
        return {(*events)[0].finished, i + 1};
      }
    }
    REQUIRE(s.abort(r.id).has_value());
    return {std::nullopt, tokens.size()};
  };
  request r;
  r.id = 1;
  r.prompt = {1, 2, 3};
  r.max_tokens = 5;
  r.eos_token_ids = {7};
  r.stop_token_ids = {9};
  CHECK(feed(r, {4, 7, 4}) == std::pair{std::optional{finish_reason::stop}, size_t{2}});
  CHECK(feed(r, {4, 9, 4}) == std::pair{std::optional{finish_reason::stop}, size_t{2}});
  CHECK(feed(r, {4, 4, 4, 4, 4, 4}) == std::pair{std::optional{finish_reason::length}, size_t{5}});
  CHECK(feed(r, {4, 4, 4, 4, 7}) == std::pair{std::optional{finish_reason::stop}, size_t{5}});  // stop wins
  r.ignore_eos = true;
  CHECK(feed(r, {7, 7, 9}) == std::pair{std::optional{finish_reason::stop}, size_t{3}});
  r.ignore_eos = false;
  r.min_tokens = 3;
  CHECK(feed(r, {7, 9, 7}) == std::pair{std::optional{finish_reason::stop}, size_t{3}});
  r.min_tokens = 0;
  r.max_tokens.reset();  // up to max_model_len 10: 7 output tokens after 3 prompt tokens
  CHECK(feed(r, {1, 1, 1, 1, 1, 1, 1, 1}) == std::pair{std::optional{finish_reason::length}, size_t{7}});
}

TEST_CASE("scheduler rejects requests that could never run, naming the numbers") {
  scheduler_config cfg{
      .max_num_seqs = 4, .max_num_batched_tokens = 64, .block_size = 16, .n_blocks = 4, .max_model_len = 100};
  auto s = make_scheduler(cfg);
  auto rejection = [&](request r) {
    auto res = s.add_request(std::move(r));
    REQUIRE_FALSE(res.has_value());
    return res.error();
  };
  auto e1 = rejection(make_request(1, 60, 41));
  CHECK(e1.code == engine_errc::exceeds_max_model_len);
  CHECK(e1.message ==
        "request 1: the prompt (60 tokens) plus max_tokens (41) is 101 tokens, over the maximum model length of 100");

  request no_max = make_request(2, 100, 1);
  no_max.max_tokens.reset();
  CHECK(rejection(no_max).message ==
        "request 2: the prompt (100 tokens) leaves no room for output within the maximum model length of 100");

  auto e3 = rejection(make_request(3, 60, 6));  // 65 slots: 5 blocks of 16, the cache has 4
  CHECK(e3.code == engine_errc::exceeds_kv_cache);
  CHECK(e3.message ==
        "request 3: 60 prompt tokens + max_tokens 6 need up to 65 KV-cache slots (5 blocks of 16) but the whole cache "
        "holds 4 blocks (64 tokens)");
  CHECK(s.add_request(make_request(4, 60, 5)).has_value());  // 64 slots: fits exactly

  auto e5 = rejection(make_request(5, 4, 4, /*n=*/5));
  CHECK(e5.code == engine_errc::too_many_sequences);
  CHECK(e5.message == "request 5: n = 5 output sequences exceeds max_num_seqs 4");

  CHECK(rejection(make_request(4, 4, 4)).code == engine_errc::duplicate_request);
  CHECK(rejection(make_request(6, 0, 4)).code == engine_errc::invalid_argument);
  CHECK(rejection(make_request(7, 4, 0)).code == engine_errc::invalid_argument);
  request mt = make_request(8, 4, 3);
  mt.min_tokens = 4;
  CHECK(rejection(mt).message == "request 8: min_tokens 4 exceeds max_tokens 3");
  CHECK(s.n_waiting() == 1);
  CHECK(s.check_invariants() == "");

  auto bad = scheduler_core::create(scheduler_config{.n_blocks = 0});
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message == "the KV cache needs at least one block, got n_blocks = 0");
}

TEST_CASE("scheduler rejects results for unknown steps and of the wrong size") {
  scheduler_config cfg{
      .max_num_seqs = 4, .max_num_batched_tokens = 64, .block_size = 4, .n_blocks = 16, .max_model_len = 64};
  auto s = make_scheduler(cfg);
  add(s, make_request(1, 3, 3));
  auto plan = s.schedule();
  REQUIRE(plan);
  auto wrong = s.update_from_output(plan->step_id, std::vector<int32_t>{1, 2});
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().code == engine_errc::result_mismatch);
  CHECK(s.n_in_flight() == 1);  // still waiting for the right result
  auto unknown = s.update_from_output(plan->step_id + 1, std::vector<int32_t>{1});
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().code == engine_errc::unknown_step);
  REQUIRE(s.update_from_output(plan->step_id, std::vector<int32_t>{1}).has_value());
  auto twice = s.update_from_output(plan->step_id, std::vector<int32_t>{1});
  REQUIRE_FALSE(twice.has_value());
  CHECK(twice.error().code == engine_errc::unknown_step);
  auto unknown_seq = s.finish_sequence(seq_id{1, 1}, finish_reason::stop);
  REQUIRE_FALSE(unknown_seq.has_value());
  CHECK(unknown_seq.error().code == engine_errc::unknown_sequence);
}
