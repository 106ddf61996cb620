// Prompt logprobs (vLLM's prompt_logprobs) through actorllm::LLM on stories260K, against the float64 reference
// forward pass: every prompt position's logprob, rank and top k, with chunked prefill, with the prefix cache holding
// the prompt (a scored request bypasses it), with n > 1 and at tp 2 and pp 2.
#include "actorllm/llm.hpp"
#include "model/model_config.hpp"
#include "model/model_source.hpp"
#include "model/model_weights.hpp"
#include "model/reference_llama.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace actorllm;

namespace {

/// A prompt of `n` ids: BOS, then a fixed pattern of ordinary tokens.
std::vector<int32_t> prompt_ids(int n) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < n; ++i)
    p.push_back(3 + (i * 37) % 500);
  return p;
}

/// log_softmax of every row of the reference's logits, in double.
std::vector<std::vector<double>> reference_logprobs(const std::vector<int32_t>& tokens) {
  auto loaded = model::load_shard(test::model_dir("stories260K"), {}, {});
  const std::vector<double> logits = model::test_util::reference_logits(loaded.config, loaded.weights, tokens);
  const auto n_vocab = static_cast<size_t>(loaded.config.n_vocab);
  std::vector<std::vector<double>> rows;
  for (size_t r = 0; r < tokens.size(); ++r) {
    std::vector<double> row(logits.begin() + static_cast<std::ptrdiff_t>(r * n_vocab),
                            logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * n_vocab));
    const double max = *std::max_element(row.begin(), row.end());
    double sum = 0.0;
    for (double v : row)
      sum += std::exp(v - max);
    for (double& v : row)
      v -= max + std::log(sum);
    rows.push_back(std::move(row));
  }
  return rows;
}

/// Every entry of `got` against the reference: entry i is prompt token i + 1 scored by row i.
void check_against_reference(const std::vector<prompt_logprob>& got, const std::vector<int32_t>& ids,
                             const std::vector<std::vector<double>>& ref, size_t k) {
  REQUIRE(got.size() + 1 == ids.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    const prompt_logprob& e = got[i];
    const std::vector<double>& row = ref[i];
    CHECK(e.token == ids[i + 1]);
    const double want = row[static_cast<size_t>(e.token)];
    CHECK(std::abs(e.logprob - want) < 1e-4);
    // The rank within what the tolerance allows: tokens clearly above count, near-ties may go either way.
    int32_t above = 0, near = 0;
    for (double v : row) {
      above += v > want + 1e-4 ? 1 : 0;
      near += v > want - 1e-4 ? 1 : 0;
    }
    CHECK(e.rank >= 1 + above);
    CHECK(e.rank <= std::max(near, 1));
    REQUIRE(e.top.size() == k);
    for (size_t j = 0; j < e.top.size(); ++j) {
      CHECK(std::abs(e.top[j].logprob - row[static_cast<size_t>(e.top[j].token)]) < 1e-4);
      if (j > 0)
        CHECK(e.top[j].logprob <= e.top[j - 1].logprob);
    }
    const double best = *std::max_element(row.begin(), row.end());
    if (!e.top.empty())
      CHECK(std::abs(e.top.front().logprob - best) < 1e-4);
  }
}

engine_config stories(int32_t tp, int32_t pp, int32_t chunk) {
  engine_config c;
  c.model = test::model_dir("stories260K").string();
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 1;
  c.tensor_parallel_size = tp;
  c.pipeline_parallel_size = pp;
  c.max_num_batched_tokens = chunk;
  c.enable_prefix_caching = true;
  return c;
}

sampling_params scored(int32_t k) {
  sampling_params p;
  p.temperature = 0;
  p.max_tokens = 3;
  p.prompt_logprobs = k;
  return p;
}

}  // namespace

TEST_CASE("prompt logprobs equal the float64 reference's, chunked or whole, after a cached copy, at tp 2 and pp 2") {
  const std::vector<int32_t> ids = prompt_ids(45);
  const auto ref = reference_logprobs(ids);
  struct layout {
    int32_t tp, pp, chunk;
  };
  for (const layout l : {layout{1, 1, 2048}, layout{1, 1, 16}, layout{2, 1, 16}, layout{1, 2, 16}}) {
    CAPTURE(l.tp);
    CAPTURE(l.pp);
    CAPTURE(l.chunk);
    LLM llm{stories(l.tp, l.pp, l.chunk)};
    sampling_params plain;
    plain.temperature = 0;
    plain.max_tokens = 3;
    const request_output cached = llm.generate(prompt{ids}, plain);
    CHECK(cached.prompt_logprobs.empty());  // not asked for

    const request_output out = llm.generate(prompt{ids}, scored(3));
    CHECK(out.usage.cached_tokens == 0);  // the prompt's blocks were cached, and bypassed
    check_against_reference(out.prompt_logprobs, ids, ref, 3);
    CHECK(out.outputs.at(0).token_ids == cached.outputs.at(0).token_ids);  // generation is unchanged
  }
}

TEST_CASE("prompt logprobs: k = 0 gives the prompt tokens alone, n > 1 scores the prompt once, short prompts") {
  LLM llm{stories(1, 1, 2048)};
  const std::vector<int32_t> ids = prompt_ids(20);
  const auto ref = reference_logprobs(ids);
  const request_output zero = llm.generate(prompt{ids}, scored(0));
  check_against_reference(zero.prompt_logprobs, ids, ref, 0);

  sampling_params two = scored(2);
  two.n = 2;
  two.temperature = 0.8f;
  two.seed = 7;
  const request_output forked = llm.generate(prompt{ids}, two);
  CHECK(forked.outputs.size() == 2);
  check_against_reference(forked.prompt_logprobs, ids, ref, 2);

  // A one-token prompt has nothing to score.
  const request_output one = llm.generate(prompt{std::vector<int32_t>{1}}, scored(2));
  CHECK(one.prompt_logprobs.empty());
  CHECK(one.outputs.at(0).token_ids.size() == 3);

  sampling_params bad = scored(-1);
  CHECK_THROWS_AS(llm.generate(prompt{ids}, bad), actorllm::error);
}

TEST_CASE("prompt logprobs survive preemptions: a small cache with 8 scored requests, each prompt scored once") {
  engine_config cfg = stories(1, 1, 32);
  cfg.kv_cache_memory = 20 * (2 * 5 * 16 * 4 * 8 * sizeof(float));  // 20 blocks of 16
  cfg.max_model_len = 128;
  cfg.max_num_seqs = 8;
  LLM llm{cfg};
  REQUIRE(llm.info().n_blocks == 20);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<generation_stream> streams;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> ids = prompt_ids(30 + i);
    ids[1] = 3 + i;  // each prompt its own
    sampling_params p = scored(2);
    p.max_tokens = 40;
    p.ignore_eos = true;
    streams.push_back(llm.stream(prompt{ids}, p));
    prompts.push_back(std::move(ids));
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    while (streams[i].wait_next()) {
    }
    CAPTURE(i);
    check_against_reference(streams[i].output().prompt_logprobs, prompts[i], reference_logprobs(prompts[i]), 2);
  }
  CHECK(llm.stats().n_preemptions > 0);  // the case is about them
}
