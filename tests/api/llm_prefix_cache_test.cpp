// Prefix caching through actorllm::LLM on stories260K: the same outputs with caching on and off (greedy, seeded
// n > 1, after preemptions), usage.cached_tokens and the salt, reset_prefix_cache, and no block held after aborts.
#include "actorllm/llm.hpp"
#include "kernels/sampling.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace actorllm;

namespace {

engine_config stories_config(bool caching) {
  engine_config c;
  c.model = test::model_dir("stories260K").string();
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 2;
  c.enable_prefix_caching = caching;
  return c;
}

sampling_params greedy_params(int32_t max_tokens) {
  sampling_params p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

/// A prompt of `n` ids: BOS, then a fixed pattern (so two calls give the same prompt).
std::vector<int32_t> prompt_ids(int n, int seed = 0) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < n; ++i)
    p.push_back(3 + (i * 29 + seed * 7) % 500);
  return p;
}

}  // namespace

TEST_CASE("prefix caching: a repeated prompt reports its cached tokens, a different salt none, outputs unchanged") {
  LLM llm{stories_config(true)};
  const sampling_params greedy = greedy_params(12);
  const prompt p{prompt_ids(70)};
  const auto first = llm.generate(p, greedy);
  CHECK(first.usage.cached_tokens == 0);
  const auto second = llm.generate(p, greedy);
  CHECK(second.usage.cached_tokens == 64);
  CHECK(second.outputs.at(0).token_ids == first.outputs.at(0).token_ids);
  CHECK(second.usage.prompt_tokens == 70);

  const auto salted = llm.generate(prompt{prompt_ids(70)}.with_cache_salt("tenant-a"), greedy);
  CHECK(salted.usage.cached_tokens == 0);
  CHECK(salted.outputs.at(0).token_ids == first.outputs.at(0).token_ids);
  CHECK(llm.generate(prompt{prompt_ids(70)}.with_cache_salt("tenant-a"), greedy).usage.cached_tokens == 64);
  CHECK(llm.generate(prompt{prompt_ids(70)}.with_cache_salt("tenant-b"), greedy).usage.cached_tokens == 0);
  CHECK_THROWS_AS(llm.generate(prompt{prompt_ids(70)}.with_cache_salt(""), greedy), actorllm::error);

  engine_stats s = llm.stats();
  CHECK(s.prefix_cache_queries == 5 * 70);
  CHECK(s.prefix_cache_hits == 2 * 64);
  CHECK(s.n_cached_blocks > 0);
  CHECK(s.n_free_blocks == s.n_blocks);  // cached blocks are free (evictable)

  CHECK(llm.reset_prefix_cache() > 0);
  CHECK(llm.stats().n_cached_blocks == 0);
  CHECK(llm.generate(p, greedy).usage.cached_tokens == 0);
  CHECK(llm.generate(p, greedy).usage.cached_tokens == 64);
}

TEST_CASE("prefix caching: n > 1 with a seed gives the same samples on and off, each sequence its own seed's run") {
  sampling_params params;
  params.n = 3;
  params.temperature = 0.9f;
  params.top_k = 50;
  params.seed = 1234;
  params.max_tokens = 24;
  params.ignore_eos = true;
  std::vector<std::vector<std::vector<int32_t>>> runs;
  for (bool caching : {true, false}) {
    LLM llm{stories_config(caching)};
    for (int len : {37, 32, 5}) {  // a partial last block, a block-aligned prompt, less than a block
      // Twice: the second time, sequence 0's prompt comes from the cache (when on).
      for (int round = 0; round < 2; ++round) {
        auto out = llm.generate(prompt{prompt_ids(len, len)}, params);
        REQUIRE(out.outputs.size() == 3);
        std::vector<std::vector<int32_t>> ids;
        for (const auto& o : out.outputs)
          ids.push_back(o.token_ids);
        CHECK(ids[0] != ids[1]);
        runs.push_back(ids);
      }
    }
    // Sequence i samples from sequence_seed(seed, i), whichever block it reads its prompt's KV from: the same as an
    // n = 1 request with that seed.
    for (uint32_t i = 0; i < 3; ++i) {
      sampling_params one = params;
      one.n = 1;
      one.seed = ops::sequence_seed(1234, i);
      CHECK(llm.generate(prompt{prompt_ids(37, 37)}, one).outputs.at(0).token_ids == runs[runs.size() - 6][i]);
    }
    CHECK(llm.stats().n_free_blocks == llm.stats().n_blocks);
  }
  REQUIRE(runs.size() == 12);
  for (size_t k = 0; k < 6; ++k) {
    CHECK(runs[k] == runs[k + 6]);  // on vs off
    if (k % 2 == 1)
      CHECK(runs[k] == runs[k - 1]);  // cached vs computed
  }
}

TEST_CASE("prefix caching: a small cache with preemptions and shared prefixes gives the same outputs on and off") {
  std::vector<std::vector<std::vector<int32_t>>> results;
  for (bool caching : {true, false}) {
    engine_config cfg = stories_config(caching);
    cfg.kv_cache_memory = 20 * (2 * 5 * 16 * 4 * 8 * sizeof(float));  // 20 blocks of 16
    cfg.max_model_len = 128;
    cfg.max_num_seqs = 16;
    LLM llm{cfg};
    REQUIRE(llm.info().n_blocks == 20);
    std::vector<generation_stream> streams;
    for (int i = 0; i < 24; ++i) {
      auto ids = prompt_ids(40);  // a shared "system prompt"
      const auto tail = prompt_ids(2 + i % 11, i);
      ids.insert(ids.end(), tail.begin() + 1, tail.end());
      sampling_params p = greedy_params(30 + i % 20);
      p.ignore_eos = true;
      streams.push_back(llm.stream(prompt{ids}, p));
    }
    // Abort two mid-way: their blocks must come back too.
    streams[3].abort();
    streams[11].abort();
    std::vector<std::vector<int32_t>> outs;
    for (auto& s : streams) {
      while (s.wait_next()) {
      }
      outs.push_back(s.output().outputs.at(0).token_ids);
    }
    outs[3].clear();
    outs[11].clear();
    results.push_back(outs);
    const auto stats = llm.stats();
    MESSAGE("caching " << caching << ": preemptions " << stats.n_preemptions << ", prefix cache hits "
                       << stats.prefix_cache_hits << " of " << stats.prefix_cache_queries << " tokens");
    CHECK(stats.n_preemptions > 0);
    if (caching)
      CHECK(stats.prefix_cache_hits > 0);
    // No leak: every block is free (the cached ones evictable).
    CHECK(stats.n_free_blocks == stats.n_blocks);
    CHECK(stats.kv_cache_usage == 0.0);
    CHECK(stats.n_requests == 0);
  }
  CHECK(results[0] == results[1]);
}
