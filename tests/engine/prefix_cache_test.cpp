// Prefix caching in the scheduler, driven with the fake model (whose KV slots chain every earlier token, so a block
// reused after a different prefix changes the output): hits skip the cached part of a prompt but always compute the
// last token, blocks become reusable only once the step that wrote them is back (also across chunked prefill and
// pipelined plans), salts separate tenants, preemption re-admits from the cache, n > 1 shares full blocks only,
// outputs are the same with caching on and off, and no block leaks after aborts.
#include "engine/scheduler_core.hpp"

#include "fake_model.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

using namespace actorllm::engine;
using actorllm::engine::test::driver;
using actorllm::engine::test::make_scheduler;
using actorllm::engine::test::run_alone;
using actorllm::engine::test::scheduled_seqs;

namespace {

constexpr int32_t vocab = 101;

std::vector<int32_t> tokens_of(int32_t length, int32_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(length));
  for (int32_t i = 0; i < length; ++i)
    p[static_cast<size_t>(i)] = (seed * 37 + i * 11) % vocab;
  return p;
}

request make_request(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens,
                     std::optional<std::string> salt = std::nullopt, int32_t n = 1) {
  request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.cache_salt = std::move(salt);
  r.n = n;
  return r;
}

void add(scheduler_core& s, const request& r) {
  auto ok = s.add_request(r);
  REQUIRE_MESSAGE(ok.has_value(), (ok.has_value() ? "" : ok.error().message));
}

/// Runs `r` alone to completion and returns the prompt tokens its first plan computed and the cached-token count
/// its events reported.
struct run_result {
  int32_t first_plan_tokens = 0;
  int32_t cached_tokens = -1;
};

run_result run_request(scheduler_core& s, driver& d, const request& r) {
  add(s, r);
  run_result out;
  auto plan = s.schedule();
  REQUIRE(plan);
  out.first_plan_tokens = plan->n_tokens();
  d.track(std::move(*plan));
  while (s.has_unfinished() || !d.in_flight.empty()) {
    step_plan p = std::move(d.in_flight.front().plan);
    d.in_flight.pop_front();
    auto events = s.update_from_output(p.step_id, d.model.run(p));
    REQUIRE(events.has_value());
    for (const auto& e : *events)
      if (e.seq.request_id == r.id)
        out.cached_tokens = e.n_cached_tokens;
    d.apply(*events);
    REQUIRE_MESSAGE(s.check_invariants() == "", s.check_invariants());
    while (auto next = s.schedule())
      d.track(std::move(*next));
  }
  auto ref = run_alone(r, 0, s.config().max_model_len, vocab);
  CHECK(d.outputs.at({r.id, 0}) == ref.output);
  return out;
}

scheduler_config small_config() {
  return scheduler_config{
      .max_num_seqs = 8, .max_num_batched_tokens = 256, .block_size = 16, .n_blocks = 64, .max_model_len = 256};
}

}  // namespace

TEST_CASE("prefix cache: a repeated prompt computes only its uncached tail and reports the cached tokens") {
  auto s = make_scheduler(small_config());
  driver d(s, vocab);
  const auto prompt = tokens_of(70, 1);  // 4 full blocks + 6 tokens
  auto first = run_request(s, d, make_request(1, prompt, 5));
  CHECK(first.first_plan_tokens == 70);
  CHECK(first.cached_tokens == 0);
  CHECK(s.prefix_cache_queries() == 70);
  CHECK(s.prefix_cache_hits() == 0);
  // The 4 prompt blocks and the first output block are cached, and free.
  CHECK(s.allocator().n_cached_blocks() == 4);
  CHECK(s.allocator().n_free_blocks() == 64);

  auto second = run_request(s, d, make_request(2, prompt, 5));
  CHECK(second.cached_tokens == 64);
  CHECK(second.first_plan_tokens == 6);
  CHECK(s.prefix_cache_queries() == 140);
  CHECK(s.prefix_cache_hits() == 64);

  // A prompt that diverges inside block 2 reuses blocks 0 and 1 only.
  auto diverging = prompt;
  diverging[40] = (diverging[40] + 1) % vocab;
  auto third = run_request(s, d, make_request(3, diverging, 5));
  CHECK(third.cached_tokens == 32);
  CHECK(third.first_plan_tokens == 70 - 32);
  CHECK(s.check_invariants() == "");
}

TEST_CASE("prefix cache: a block-aligned prompt still computes its last block, for the last token's logits") {
  auto s = make_scheduler(small_config());
  driver d(s, vocab);
  const auto prompt = tokens_of(48, 2);  // exactly 3 blocks
  run_request(s, d, make_request(1, prompt, 3));
  auto again = run_request(s, d, make_request(2, prompt, 3));
  CHECK(again.cached_tokens == 32);
  CHECK(again.first_plan_tokens == 16);
}

TEST_CASE("prefix cache: a different cache_salt gets no hit, the same salt does") {
  auto s = make_scheduler(small_config());
  driver d(s, vocab);
  const auto prompt = tokens_of(40, 3);
  CHECK(run_request(s, d, make_request(1, prompt, 4, std::string{"alice"})).cached_tokens == 0);
  CHECK(run_request(s, d, make_request(2, prompt, 4, std::string{"mallory"})).cached_tokens == 0);
  CHECK(run_request(s, d, make_request(3, prompt, 4)).cached_tokens == 0);  // unsalted: no hit on salted blocks
  CHECK(run_request(s, d, make_request(4, prompt, 4, std::string{"alice"})).cached_tokens == 32);
  CHECK(run_request(s, d, make_request(5, prompt, 4)).cached_tokens == 32);
  auto rejected = s.add_request(make_request(6, prompt, 4, std::string{}));
  REQUIRE_FALSE(rejected.has_value());
  CHECK(rejected.error().code == engine_errc::invalid_argument);
  CHECK(rejected.error().message.find("cache_salt") != std::string::npos);
}

TEST_CASE("prefix cache: blocks are reused only after the step that computed them is back") {
  SUBCASE("two identical prompts admitted in the same step compute both") {
    auto s = make_scheduler(small_config());
    driver d(s, vocab);
    const auto prompt = tokens_of(40, 4);
    add(s, make_request(1, prompt, 4));
    add(s, make_request(2, prompt, 4));
    auto plan = s.schedule();
    REQUIRE(plan);
    CHECK(plan->n_tokens() == 80);
    d.track(std::move(*plan));
    d.run_to_completion();
    CHECK(s.prefix_cache_hits() == 0);
  }
  SUBCASE("chunked prefill: a request arriving mid-prefill hits the chunks already computed, not the one in flight") {
    scheduler_config cfg = small_config();
    cfg.max_num_batched_tokens = 32;
    cfg.pp_size = 2;
    auto s = make_scheduler(cfg);
    driver d(s, vocab);
    const auto prompt = tokens_of(100, 5);
    add(s, make_request(1, prompt, 4));
    auto chunk1 = s.schedule();  // tokens 0..31
    REQUIRE(chunk1);
    CHECK(s.allocator().n_cached_blocks() == 0);
    d.apply(*s.update_from_output(chunk1->step_id, d.model.run(*chunk1)));
    CHECK(s.allocator().n_cached_blocks() == 2);
    auto chunk2 = s.schedule();  // tokens 32..63, in flight from here on
    REQUIRE(chunk2);
    d.track(std::move(*chunk2));
    CHECK(s.allocator().n_cached_blocks() == 2);
    add(s, make_request(2, prompt, 4));
    auto plan = s.schedule();
    REQUIRE(plan);
    REQUIRE(scheduled_seqs(*plan) == std::vector<seq_id>{{2, 0}});
    CHECK(plan->positions.front() == 32);  // blocks 0, 1 hit; blocks 2, 3 are still being written
    d.track(std::move(*plan));
    d.run_to_completion();
    CHECK(s.prefix_cache_hits() == 32);
    CHECK(d.outputs.at({2, 0}) == run_alone(make_request(2, prompt, 4), 0, cfg.max_model_len, vocab).output);
  }
}

TEST_CASE("prefix cache: a preempted sequence comes back through the cache") {
  scheduler_config cfg{
      .max_num_seqs = 4, .max_num_batched_tokens = 64, .block_size = 4, .n_blocks = 12, .max_model_len = 48};
  std::vector<int32_t> recomputed;
  for (bool caching : {true, false}) {
    cfg.enable_prefix_caching = caching;
    auto s = make_scheduler(cfg);
    driver d(s, vocab);
    d.keep_history = true;
    std::vector<request> reqs = {make_request(1, tokens_of(17, 6), 20), make_request(2, tokens_of(17, 7), 20)};
    for (const auto& r : reqs)
      add(s, r);
    d.run_to_completion();
    CHECK(s.n_preemptions() > 0);
    for (const auto& r : reqs)
      CHECK(d.outputs.at({r.id, 0}) == run_alone(r, 0, cfg.max_model_len, vocab).output);
    int32_t total = 0;
    for (const auto& p : d.history)
      total += p.n_tokens();
    recomputed.push_back(total);
  }
  CAPTURE(recomputed[0]);
  CAPTURE(recomputed[1]);
  CHECK(recomputed[0] < recomputed[1]);
}

TEST_CASE("prefix cache: n > 1 siblings share full prompt blocks and outputs match caching off") {
  for (int32_t len : {37, 32}) {  // a partial last block, and a block-aligned prompt
    std::vector<std::map<seq_id, std::vector<int32_t>>> outputs;
    for (bool caching : {true, false}) {
      scheduler_config cfg = small_config();
      cfg.enable_prefix_caching = caching;
      auto s = make_scheduler(cfg);
      driver d(s, vocab);
      request r = make_request(9, tokens_of(len, 8), 10, std::nullopt, /*n=*/3);
      add(s, r);
      auto prefill = s.schedule();
      REQUIRE(prefill);
      CHECK(prefill->n_tokens() == len);
      const auto full = static_cast<size_t>(len / 16);
      REQUIRE(prefill->sequences[0].new_table);
      for (uint32_t i = 1; i < 3; ++i) {
        auto t = s.allocator().block_table(seq_id{9, i});
        CHECK(std::vector<int32_t>(t.begin(), t.end()) ==
              std::vector<int32_t>(prefill->sequences[0].blocks.begin(),
                                   prefill->sequences[0].blocks.begin() + static_cast<std::ptrdiff_t>(full)));
      }
      d.track(std::move(*prefill));
      d.run_to_completion();
      for (uint32_t i = 0; i < 3; ++i)
        CHECK(d.outputs.at({9, i}) == run_alone(r, i, cfg.max_model_len, vocab).output);
      CHECK(s.allocator().n_free_blocks() == cfg.n_blocks);
      CHECK(s.allocator().n_evictable_blocks() == s.allocator().n_cached_blocks());
      outputs.push_back(d.outputs);
    }
    CHECK(outputs[0] == outputs[1]);
  }
}

TEST_CASE("prefix cache: reset_prefix_cache drops every cached block") {
  auto s = make_scheduler(small_config());
  driver d(s, vocab);
  const auto prompt = tokens_of(50, 9);
  run_request(s, d, make_request(1, prompt, 3));
  CHECK(s.allocator().n_cached_blocks() == 3);
  CHECK(s.reset_prefix_cache() == 3);
  CHECK(s.allocator().n_cached_blocks() == 0);
  CHECK(run_request(s, d, make_request(2, prompt, 3)).cached_tokens == 0);
  CHECK(run_request(s, d, make_request(3, prompt, 3)).cached_tokens == 48);
  CHECK(s.check_invariants() == "");
}

TEST_CASE("prefix cache: caching off computes every prompt in full and reports nothing") {
  scheduler_config cfg = small_config();
  cfg.enable_prefix_caching = false;
  auto s = make_scheduler(cfg);
  driver d(s, vocab);
  const auto prompt = tokens_of(70, 1);
  run_request(s, d, make_request(1, prompt, 5));
  auto again = run_request(s, d, make_request(2, prompt, 5));
  CHECK(again.first_plan_tokens == 70);
  CHECK(again.cached_tokens == 0);
  CHECK(s.prefix_cache_queries() == 0);
  CHECK(s.allocator().n_cached_blocks() == 0);
}

TEST_CASE("prefix cache: no block leaks after aborts, stop strings and finished requests") {
  scheduler_config cfg{.max_num_seqs = 6,
                       .max_num_batched_tokens = 24,
                       .block_size = 4,
                       .n_blocks = 24,
                       .max_model_len = 64,
                       .pp_size = 2};
  auto s = make_scheduler(cfg);
  driver d(s, vocab);
  const auto shared = tokens_of(12, 10);
  uint64_t id = 1;
  for (int round = 0; round < 40; ++round) {
    for (int k = 0; k < 3; ++k) {
      auto prompt = shared;
      auto tail = tokens_of(1 + (round + k) % 9, static_cast<int32_t>(id));
      prompt.insert(prompt.end(), tail.begin(), tail.end());
      add(s, make_request(id++, prompt, 8, std::nullopt, 1 + (round + k) % 3));
    }
    d.step();
    d.step();
    // Abort one request whose plan may still be in flight, cut another short as a stop string would.
    if (auto events = s.abort(id - 2); events.has_value())
      d.apply(*events);
    if (s.tokens(seq_id{id - 1, 0}).size() > 0)
      if (auto events = s.finish_sequence(seq_id{id - 1, 0}, finish_reason::stop); events.has_value())
        d.apply(*events);
    REQUIRE_MESSAGE(s.check_invariants() == "", s.check_invariants());
  }
  d.run_to_completion();
  CHECK(s.prefix_cache_hits() > 0);
  CHECK(s.allocator().n_sequences() == 0);
  CHECK(s.allocator().n_free_blocks() == cfg.n_blocks);
  CHECK(s.allocator().n_evictable_blocks() == s.allocator().n_cached_blocks());
  CHECK(s.allocator().check_invariants() == "");
}
