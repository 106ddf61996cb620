// The sampler shard's per-sequence state: seeded per sequence, kept across steps until released, and a sample row
// without state is an error rather than a guess.
#include "runner/sequence_samplers.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/sampling.hpp"
#include "support/test_paths.hpp"
#include "text/structured/constraint_cache.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>

using namespace actorllm;

namespace {

constexpr int64_t vocab = 16;

engine::sampler_setup setup(uint64_t id, float temperature, uint64_t seed, int32_t logprobs = -1) {
  engine::sampler_setup s;
  s.request_id = id;
  s.spec.params.temperature = temperature;
  s.spec.seed = seed;
  s.spec.params.logprobs = logprobs;
  return s;
}

// Logits that favour token (7 * i) % vocab a little, so a draw at temperature 1 has real choices.
std::vector<float> logits_for(size_t rows) {
  std::vector<float> l(rows * vocab);
  for (size_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < vocab; ++v)
      l[r * vocab + static_cast<size_t>(v)] = std::sin(static_cast<float>(v * 3 + r));
  return l;
}

// Samples `plan` from host logits through a CPU backend, as the sampler shard does from its backend's logits.
runner::step_result sample_host(runner::sequence_samplers& samplers, const engine::step_plan& plan,
                                const std::vector<float>& logits) {
  static const std::unique_ptr<backend> be = make_backend(device_kind::cpu, 1);
  tensor t = make_host_tensor(dtype::f32, {static_cast<int64_t>(logits.size()) / vocab, vocab});
  std::copy_n(logits.begin(), t.numel(), t.data_as<float>());
  return samplers.sample(plan, *be, t);
}

engine::step_plan plan_sampling(uint64_t step, std::vector<engine::seq_id> seqs) {
  engine::step_plan p;
  p.step_id = step;
  p.sample_seqs = std::move(seqs);
  for (size_t i = 0; i < p.sample_seqs.size(); ++i)
    p.sample_rows.push_back(static_cast<int32_t>(i));
  return p;
}

}  // namespace

TEST_CASE("sequence 0 draws from the request seed itself, others from derived seeds") {
  CHECK(ops::sequence_seed(42, 0) == 42);
  CHECK(ops::sequence_seed(42, 1) != 42);
  CHECK(ops::sequence_seed(42, 1) != ops::sequence_seed(42, 2));
  CHECK(ops::sequence_seed(42, 1) != ops::sequence_seed(43, 1));

  // A request's sequence 0 reproduces a plain sampler_rng{seed} run, step after step.
  runner::sequence_samplers samplers;
  auto first = plan_sampling(1, {{5, 0}});
  first.new_requests.push_back(setup(5, 1.0f, 42));
  samplers.apply(first);
  cpu::sampler_rng rng{42};
  cpu::sampling_params params;
  std::vector<int32_t> outputs;
  for (uint64_t step = 1; step <= 20; ++step) {
    auto plan = step == 1 ? first : plan_sampling(step, {{5, 0}});
    auto logits = logits_for(1);
    auto expected_logits = logits;
    auto result = sample_host(samplers, plan, logits);
    REQUIRE(result.error.empty());
    auto expected = cpu::sample(expected_logits.data(), vocab, params, {}, outputs, rng);
    outputs.push_back(expected.token);
    CHECK(result.step_id == step);
    REQUIRE(result.tokens.size() == 1);
    CHECK(result.tokens[0].token == expected.token);
    CHECK(result.tokens[0].logprob == expected.logprob);
  }
  CHECK(std::vector<int32_t>(samplers.outputs({5, 0}).begin(), samplers.outputs({5, 0}).end()) == outputs);
}

TEST_CASE("each sequence keeps its own generator however the rows are batched") {
  auto run = [](bool batched) {
    runner::sequence_samplers samplers;
    engine::step_plan setup_plan;
    setup_plan.new_requests = {setup(1, 1.0f, 7), setup(2, 1.0f, 7)};
    samplers.apply(setup_plan);
    std::vector<std::vector<int32_t>> out(2);
    for (uint64_t step = 0; step < 12; ++step) {
      if (batched) {
        auto plan = plan_sampling(step, {{1, 0}, {2, 0}});
        auto logits = logits_for(2);
        auto r = sample_host(samplers, plan, logits);
        out[0].push_back(r.tokens[0].token);
        out[1].push_back(r.tokens[1].token);
      } else {
        for (uint64_t id : {2, 1}) {
          auto plan = plan_sampling(step, {{id, 0}});
          auto logits = logits_for(2);  // row 0 is what the batched run gives request 1; use the matching row
          std::vector<float> row(logits.begin() + (id == 1 ? 0 : vocab),
                                 logits.begin() + (id == 1 ? vocab : 2 * vocab));
          out[id - 1].push_back(sample_host(samplers, plan, row).tokens[0].token);
        }
      }
    }
    return out;
  };
  auto together = run(true);
  auto apart = run(false);
  CHECK(together == apart);
  CHECK(together[0] != together[1]);  // same seed, different logits rows: the streams are independent
}

TEST_CASE("released requests lose their state, sampling one then is an error") {
  runner::sequence_samplers samplers;
  auto plan = plan_sampling(1, {{9, 0}, {9, 1}});
  plan.new_requests.push_back(setup(9, 0.0f, 1, 2));
  samplers.apply(plan);
  auto logits = logits_for(2);
  auto r = sample_host(samplers, plan, logits);
  REQUIRE(r.error.empty());
  REQUIRE(r.tokens.size() == 2);
  CHECK(r.tokens[0].top.size() == 2);                    // logprobs = 2
  CHECK(r.tokens[0].top[0].token == r.tokens[0].token);  // greedy: the top token is the sampled one
  CHECK(samplers.n_requests() == 1);

  engine::step_plan release;
  release.released_requests = {9, 12345};  // an unknown id is fine
  samplers.apply(release);
  CHECK(samplers.n_requests() == 0);
  auto again = plan_sampling(2, {{9, 0}});
  auto l1 = logits_for(1);
  auto failed = sample_host(samplers, again, l1);
  CHECK(failed.tokens.empty());
  CHECK(failed.error.find("no sampler state for request 9") != std::string::npos);

  auto wrong_size = plan_sampling(3, {{9, 0}});
  std::vector<float> short_logits(3);
  CHECK(sample_host(samplers, wrong_size, short_logits).error.find("for 1 sample rows") != std::string::npos);
}

TEST_CASE("a sequence resumed from its output so far samples what it would have sampled next") {
  // Presence penalty and a seeded draw at temperature 1: both depend on the state the first tokens left behind.
  auto seeded = [] {
    auto s = setup(9, 1.0f, 1234);
    s.spec.params.presence_penalty = 0.7f;
    return s;
  };
  runner::sequence_samplers whole;
  std::vector<int32_t> tokens;
  for (uint64_t step = 1; step <= 12; ++step) {
    auto plan = plan_sampling(step, {{9, 0}});
    if (step == 1)
      plan.new_requests.push_back(seeded());
    whole.apply(plan);
    auto result = sample_host(whole, plan, logits_for(1));
    REQUIRE(result.error.empty());
    tokens.push_back(result.tokens.at(0).token);
  }
  REQUIRE(std::set<int32_t>(tokens.begin(), tokens.end()).size() > 2);  // the draws had real choices

  for (size_t cut : {size_t{1}, size_t{5}, size_t{11}}) {
    CAPTURE(cut);
    runner::sequence_samplers resumed;
    auto plan = plan_sampling(100, {{9, 0}});
    auto s = seeded();
    s.resume_output_ids.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(cut));
    plan.new_requests.push_back(s);
    std::vector<int32_t> rest;
    for (size_t i = cut; i < tokens.size(); ++i) {
      auto step = i == cut ? plan : plan_sampling(100 + i, {{9, 0}});
      resumed.apply(step);
      auto result = sample_host(resumed, step, logits_for(1));
      REQUIRE(result.error.empty());
      rest.push_back(result.tokens.at(0).token);
    }
    CHECK(rest == std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(cut), tokens.end()));
    CHECK(std::vector<int32_t>(resumed.outputs({9, 0}).begin(), resumed.outputs({9, 0}).end()) == tokens);
  }

  // Without the generator's advance the continuation differs: the test can tell.
  runner::sequence_samplers fresh;
  auto plan = plan_sampling(200, {{9, 0}});
  plan.new_requests.push_back(seeded());
  std::vector<int32_t> from_scratch;
  for (size_t i = 0; i < 7; ++i) {
    auto step = i == 0 ? plan : plan_sampling(200 + i, {{9, 0}});
    fresh.apply(step);
    auto result = sample_host(fresh, step, logits_for(1));
    from_scratch.push_back(result.tokens.at(0).token);
  }
  CHECK(from_scratch != std::vector<int32_t>(tokens.begin() + 5, tokens.end()));
}

TEST_CASE("logprob_token_ids: each sampled token reports the listed tokens' raw logprobs, in their order") {
  runner::sequence_samplers samplers;
  auto plan = plan_sampling(1, {{3, 0}, {4, 0}});
  auto listed = setup(3, 1.0f, 11, 2);
  listed.spec.logprob_token_ids = {9, 0, 9, 15};
  listed.spec.params.logprobs = 0;               // as to_sampling_spec sets it: the listed ids replace the top logprobs
  listed.spec.params.logit_bias = {{9, 50.0f}};  // processors change what is sampled, not the raw logprobs reported
  plan.new_requests = {listed, setup(4, 1.0f, 11, 2)};
  samplers.apply(plan);
  const auto logits = logits_for(2);
  auto result = sample_host(samplers, plan, logits);
  REQUIRE(result.error.empty());
  REQUIRE(result.tokens.size() == 2);
  CHECK(result.tokens[0].token == 9);  // the bias made it certain
  // The listed ids, as given, with the logprobs of the row's raw logits (as logprobs_of computes them).
  const std::span<const float> row0(logits.data(), vocab);
  REQUIRE(result.tokens[0].top.size() == 4);
  for (size_t k = 0; k < 4; ++k) {
    const int32_t id = listed.spec.logprob_token_ids[k];
    CHECK(result.tokens[0].top[k].token == id);
    CHECK(result.tokens[0].top[k].logprob == doctest::Approx(ops::logprobs_of(row0, id, 0).logprob).epsilon(1e-6));
  }
  // The sampled token's own logprob is the backend's, the raw one too.
  CHECK(result.tokens[0].logprob == doctest::Approx(result.tokens[0].top[0].logprob).epsilon(1e-5));
  // The other request of the batch keeps its top 2.
  REQUIRE(result.tokens[1].top.size() == 2);
  const std::span<const float> row1(logits.data() + vocab, vocab);
  CHECK(result.tokens[1].top[0].token == ops::logprobs_of(row1, 0, 2).top[0].token);

  // An id outside the logits' vocabulary is a protocol error, not a read past the row.
  auto bad = setup(5, 0.0f, 1, 0);
  bad.spec.logprob_token_ids = {static_cast<int32_t>(vocab)};
  auto plan2 = plan_sampling(2, {{5, 0}});
  plan2.new_requests = {bad};
  samplers.apply(plan2);
  auto r2 = sample_host(samplers, plan2, logits_for(1));
  CHECK(r2.error.find("token 16 outside the vocabulary of 16") != std::string::npos);
}

TEST_CASE("logprobs_of_tokens agrees with logprobs_of, with its NaN and infinity conventions") {
  std::vector<float> row{1.0f, std::nanf(""), 3.0f, -std::numeric_limits<float>::infinity(), 0.5f};
  const std::vector<int32_t> ids{2, 1, 3, 0, 2};
  const auto lps = ops::logprobs_of_tokens(row, ids);
  REQUIRE(lps.size() == ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    CHECK(lps[k].token == ids[k]);
    CHECK(lps[k].logprob == ops::logprobs_of(row, ids[k], 0).logprob);
  }
  CHECK(lps[1].logprob == -std::numeric_limits<float>::infinity());
  // A row of nothing but -inf is uniform, as the sampler reads it.
  std::vector<float> none(4, -std::numeric_limits<float>::infinity());
  CHECK(ops::logprobs_of_tokens(none, std::vector<int32_t>{3})[0].logprob == doctest::Approx(-std::log(4.0)));
}

namespace {

// Structured outputs after a reasoning part, over stories260K's 512-token vocabulary: the pattern is two digits (their
// pieces and byte tokens); token 300 ("▁ha") stands for the reasoning's text and 302 ("en") for its end token.
constexpr int64_t tok_vocab = 512;
constexpr int32_t free_token = 300, end_token = 302;
const std::string two_digits = "\\d\\d";

std::string tokenizer_dir() { return std::filesystem::absolute(test::model_dir("stories260K")).string(); }

engine::sampler_setup constrained_setup(uint64_t id, int32_t reasoning_end, float temperature = 0.0f) {
  engine::sampler_setup s;
  s.request_id = id;
  s.spec.params.temperature = temperature;
  s.spec.seed = 77;
  s.spec.structured_pattern = two_digits;
  s.spec.reasoning_end_token_id = reasoning_end;
  return s;
}

// One row of logits that puts `top` far ahead of every other token.
std::vector<float> peaked(int32_t top) {
  std::vector<float> l(tok_vocab, 0.0f);
  l[static_cast<size_t>(top)] = 20.0f;
  return l;
}

int32_t sample_one(runner::sequence_samplers& samplers, const engine::step_plan& plan,
                   const std::vector<float>& logits) {
  static const std::unique_ptr<backend> be = make_backend(device_kind::cpu, 1);
  tensor t = make_host_tensor(dtype::f32, {1, tok_vocab});
  std::copy_n(logits.begin(), t.numel(), t.data_as<float>());
  auto r = samplers.sample(plan, *be, t);
  REQUIRE_MESSAGE(r.error.empty(), r.error);
  REQUIRE(r.tokens.size() == 1);
  return r.tokens[0].token;
}

// A token that reads as one digit: its own piece ("7") or its byte-fallback token ("<0x37>").
bool is_digit_token(int32_t t) {
  static const text::tokenizer tok = text::tokenizer::from_directory(test::model_dir("stories260K"));
  const std::string piece = tok.id_to_token(t);
  return (piece.size() == 1 && piece[0] >= '0' && piece[0] <= '9') ||
         (piece.size() == 6 && piece.starts_with("<0x3") && piece[4] >= '0' && piece[4] <= '9');
}

}  // namespace

TEST_CASE("a constraint after a reasoning part: free until the end token, constrained over the tokens after it") {
  const auto c = text::structured::compiled_constraint(tokenizer_dir(), two_digits);
  const auto allowed = [&](int32_t state, int32_t t) {
    return (c->mask(state)[static_cast<size_t>(t) / 64] >> (static_cast<unsigned>(t) % 64) & 1) != 0;
  };
  REQUIRE(!allowed(c->start(), free_token));
  REQUIRE(!allowed(c->start(), end_token));

  // Without a reasoning part the first token is already held to the pattern.
  runner::sequence_samplers plain{tokenizer_dir()};
  auto first = plan_sampling(1, {{1, 0}});
  first.new_requests.push_back(constrained_setup(1, -1));
  plain.apply(first);
  CHECK(is_digit_token(sample_one(plain, first, peaked(free_token))));

  // With one: the reasoning's tokens (and the end token) are sampled freely, then two digits and nothing but eos.
  runner::sequence_samplers samplers{tokenizer_dir()};
  auto plan = plan_sampling(1, {{2, 0}, {2, 1}});
  plan.new_requests.push_back(constrained_setup(2, end_token));
  samplers.apply(plan);
  const std::vector<int32_t> peaks{free_token, free_token, end_token, free_token, free_token, free_token};
  for (uint32_t index : {0u, 1u}) {  // every sequence of the request has its own gate
    std::vector<int32_t> out;
    for (size_t step = 0; step < peaks.size(); ++step)
      out.push_back(sample_one(samplers, plan_sampling(10 + step, {{2, index}}), peaked(peaks[step])));
    CAPTURE(index);
    CHECK(out[0] == free_token);
    CHECK(out[1] == free_token);
    CHECK(out[2] == end_token);
    CHECK(is_digit_token(out[3]));
    CHECK(is_digit_token(out[4]));
    CHECK(c->is_eos(out[5]));  // the pattern is whole: only eos is left
  }

  // The end token inside the constrained part is just a token the pattern does not allow.
  runner::sequence_samplers after{tokenizer_dir()};
  auto again = plan_sampling(1, {{3, 0}});
  again.new_requests.push_back(constrained_setup(3, end_token));
  after.apply(again);
  CHECK(sample_one(after, again, peaked(end_token)) == end_token);
  CHECK(is_digit_token(sample_one(after, plan_sampling(2, {{3, 0}}), peaked(end_token))));
}

TEST_CASE("reasoning_ended: the end token after the last start token, as vLLM's reasoners read a prompt") {
  using runner::reasoning_ended;
  const std::vector<int32_t> open{5, 7, 9}, closed{5, 7, 8, 9}, reopened{5, 8, 7, 9}, none{5, 9};
  CHECK(!reasoning_ended(open, 7, 8));
  CHECK(reasoning_ended(closed, 7, 8));
  CHECK(!reasoning_ended(reopened, 7, 8));
  CHECK(!reasoning_ended(none, 7, 8));
  CHECK(reasoning_ended(std::vector<int32_t>{8, 1}, -1, 8));  // no start token known: any end token
  CHECK(!reasoning_ended(closed, 7, -1));
}

TEST_CASE("the sampler builds token masks over the tokenizer it was built with, and without one a pattern fails") {
  runner::sequence_samplers with{tokenizer_dir()};
  auto plan = plan_sampling(1, {{1, 0}});
  plan.new_requests.push_back(constrained_setup(1, -1));
  with.apply(plan);
  CHECK(is_digit_token(sample_one(with, plan, peaked(free_token))));

  runner::sequence_samplers without;
  without.apply(plan);
  static const std::unique_ptr<backend> be = make_backend(device_kind::cpu, 1);
  tensor t = make_host_tensor(dtype::f32, {1, tok_vocab});
  const auto logits = peaked(free_token);
  std::copy_n(logits.begin(), t.numel(), t.data_as<float>());
  const auto r = without.sample(plan, *be, t);
  CHECK(r.tokens.empty());
  CHECK(r.error.find("structured outputs: this sampler was built without a tokenizer") != std::string::npos);
}

TEST_CASE("a resumed sequence replays the reasoning gate: the automaton consumes only the tokens after the end") {
  // Seeded draws at temperature 1 (two free tokens, the end token at the third step, then digits and eos): the whole
  // run, then resumed from every cut, must sample the same continuation (the gate and the automaton's state
  // replayed).
  auto logits_at = [](size_t step) {
    std::vector<float> l(tok_vocab);
    for (int64_t v = 0; v < tok_vocab; ++v)
      l[static_cast<size_t>(v)] = std::sin(static_cast<float>(v * 5 + static_cast<int64_t>(step)));
    l[end_token] = step == 2 ? 20.0f : -20.0f;
    return l;
  };
  runner::sequence_samplers whole{tokenizer_dir()};
  std::vector<int32_t> tokens;
  for (size_t step = 0; step < 8; ++step) {
    auto plan = plan_sampling(step + 1, {{9, 0}});
    if (step == 0)
      plan.new_requests.push_back(constrained_setup(9, end_token, 1.0f));
    whole.apply(plan);
    tokens.push_back(sample_one(whole, plan, logits_at(step)));
  }
  REQUIRE(tokens[2] == end_token);
  CHECK(!is_digit_token(tokens[0]));  // free: from the whole vocabulary (these logits favour no digit)
  CHECK(is_digit_token(tokens[3]));
  CHECK(is_digit_token(tokens[4]));

  for (size_t cut = 1; cut < tokens.size(); ++cut) {
    CAPTURE(cut);
    runner::sequence_samplers resumed{tokenizer_dir()};
    auto s = constrained_setup(9, end_token, 1.0f);
    s.resume_output_ids.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(cut));
    std::vector<int32_t> rest;
    for (size_t step = cut; step < tokens.size(); ++step) {
      auto plan = plan_sampling(100 + step, {{9, 0}});
      if (step == cut)
        plan.new_requests.push_back(s);
      resumed.apply(plan);
      rest.push_back(sample_one(resumed, plan, logits_at(step)));
    }
    CHECK(rest == std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(cut), tokens.end()));
  }
}
