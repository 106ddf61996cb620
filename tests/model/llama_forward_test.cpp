// The Llama forward pass against stories260K's golden outputs (an independent float64 implementation), batched
// against alone, and tensor-parallel against one rank.
#include "comm/collective.hpp"
#include "comm/shared_memory_collective.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/model_source.hpp"
#include "model/stories_golden.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <thread>

using namespace actorllm;

namespace {

const test::stories_golden& load_golden() { return test::load_stories_golden(); }

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

// `m` with its KV cache in `type`, for a cache built next.
model::llama_model& with_kv_dtype(model::llama_model& m, dtype type) {
  m.set_kv_cache_dtype(type);
  return m;
}

// One model with its cache and a trivial block layout, for single-sequence runs.
struct stories_model {
  explicit stories_model(int64_t n_blocks = 64, int threads = 2, dtype kv_type = dtype::f32)
      : be{threads},
        loaded{model::load_shard(test::model_dir("stories260K"), {}, {})},
        llm{loaded.config, std::move(loaded.weights), {}, comm, be},
        cache{be, with_kv_dtype(llm, kv_type).cache_shape(16), n_blocks} {}

  // Greedy continuation of `prompt` for `n` tokens, prefilling in chunks of `chunk` tokens.
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int64_t n, int64_t chunk = 1 << 30) {
    std::vector<int32_t> table(static_cast<size_t>(cache.n_blocks()));
    std::iota(table.begin(), table.end(), 0);
    std::vector<float> logits;
    for (size_t b = 0; b < prompt.size();) {
      size_t len = std::min(prompt.size() - b, static_cast<size_t>(chunk));
      model::forward_batch fb;
      fb.add_sequence(std::span<const int32_t>{prompt}.subspan(b, len), static_cast<int32_t>(b), table,
                      b + len == prompt.size());
      logits = llm.forward(fb, cache);
      b += len;
    }
    std::vector<int32_t> out;
    const int64_t vocab = llm.config().n_vocab;
    while (true) {
      out.push_back(argmax(logits.data(), vocab));
      if (static_cast<int64_t>(out.size()) == n)
        return out;
      model::forward_batch fb;
      int32_t tok[1] = {out.back()};
      fb.add_sequence(tok, static_cast<int32_t>(prompt.size() + out.size() - 1), table, true);
      logits = llm.forward(fb, cache);
    }
  }

  cpu::cpu_backend be;
  single_rank_collective comm;
  model::loaded_shard loaded;
  model::llama_model llm;
  model::kv_cache cache;
};

}  // namespace

TEST_CASE("stories260K first-step logits match the float64 reference within 1e-4") {
  stories_model m;
  for (const auto& p : load_golden().prompts) {
    std::vector<int32_t> table(8);
    std::iota(table.begin(), table.end(), 0);
    model::forward_batch fb;
    fb.add_sequence(p.prompt_ids, 0, table, true);
    auto logits = m.llm.forward(fb, m.cache);
    REQUIRE(logits.size() == p.first_step_logits.size());
    double max_diff = 0.0;
    for (size_t i = 0; i < logits.size(); ++i)
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(logits[i]) - p.first_step_logits[i]));
    MESSAGE("prompt of " << p.prompt_ids.size() << " tokens: max |logit diff| = " << max_diff);
    CHECK(max_diff < 1e-4);
  }
}

TEST_CASE("stories260K: weights used in place in the file mapping give the logits of copied ones, bit for bit") {
  model::loaded_shard mapped = model::load_shard(test::model_dir("stories260K"), {}, {});
  model::loaded_shard copied = model::load_shard(test::model_dir("stories260K"), {}, {});
  size_t n_mapped = 0;
  for (const auto& [name, t] : mapped.weights.tensors())
    n_mapped += t.is_view();
  CHECK(n_mapped == mapped.weights.size());  // f32 kept as f32, every tensor in one piece
  for (const auto& [name, t] : copied.weights.tensors()) {
    (void)copied.weights.find_mutable(name)->data();  // copy on write: owned storage from here on
    CHECK_FALSE(copied.weights.get(name).is_view());
  }
  cpu::cpu_backend be{2};
  single_rank_collective comm;
  model::llama_model a{mapped.config, std::move(mapped.weights), {}, comm, be};
  model::llama_model b{copied.config, std::move(copied.weights), {}, comm, be};
  model::kv_cache cache_a{be, a.cache_shape(16), 8}, cache_b{be, b.cache_shape(16), 8};
  std::vector<int32_t> table(8);
  std::iota(table.begin(), table.end(), 0);
  for (const auto& p : load_golden().prompts) {
    model::forward_batch fb;
    fb.add_sequence(p.prompt_ids, 0, table, true);
    CHECK(a.forward(fb, cache_a) == b.forward(fb, cache_b));
  }
}

TEST_CASE("stories260K greedy decoding from BOS gives the golden 256 tokens") {
  stories_model m;
  const auto& g = load_golden();
  CHECK(m.greedy({1}, static_cast<int64_t>(g.bos_output_ids.size())) == g.bos_output_ids);
}

TEST_CASE("stories260K greedy continuations of the reference prompts, whole and in prefill chunks") {
  stories_model m;
  for (const auto& p : load_golden().prompts) {
    auto n = static_cast<int64_t>(p.greedy_output_ids.size());
    CHECK(m.greedy(p.prompt_ids, n) == p.greedy_output_ids);
    CHECK(m.greedy(p.prompt_ids, n, 3) == p.greedy_output_ids);
  }
}

TEST_CASE("stories260K with a bf16 or f16 KV cache gives the golden tokens from BOS and the reference prompts") {
  const auto& g = load_golden();
  double bf16_drift = 0.0, f16_drift = 0.0;
  for (dtype kv : {dtype::bf16, dtype::f16}) {
    CAPTURE(dtype_name(kv));
    stories_model m{64, 2, kv};
    REQUIRE(m.cache.layer(0).k.type == kv);
    CHECK(m.cache.shape().bytes_per_block() * 2 == stories_model{64, 2, dtype::f32}.cache.shape().bytes_per_block());
    CHECK(m.greedy({1}, static_cast<int64_t>(g.bos_output_ids.size())) == g.bos_output_ids);
    for (const auto& p : g.prompts) {
      auto n = static_cast<int64_t>(p.greedy_output_ids.size());
      CHECK(m.greedy(p.prompt_ids, n) == p.greedy_output_ids);
      CHECK(m.greedy(p.prompt_ids, n, 3) == p.greedy_output_ids);
    }
    // The first-step logits move by the cache's rounding only (k and v to 8 or 11 significant bits): measured 0.093
    // (bf16) and 0.0096 (f16) here, about the 2^3 apart the two formats' precisions are; bounded with some margin.
    double max_diff = 0.0;
    for (const auto& p : g.prompts) {
      std::vector<int32_t> table(8);
      std::iota(table.begin(), table.end(), 0);
      model::forward_batch fb;
      fb.add_sequence(p.prompt_ids, 0, table, true);
      auto logits = m.llm.forward(fb, m.cache);
      for (size_t i = 0; i < logits.size(); ++i)
        max_diff = std::max(max_diff, std::fabs(static_cast<double>(logits[i]) - p.first_step_logits[i]));
    }
    MESSAGE(dtype_name(kv) << " KV cache: max |first-step logit - float64 reference| = " << max_diff);
    CHECK(max_diff < (kv == dtype::bf16 ? 0.15 : 0.02));
    (kv == dtype::bf16 ? bf16_drift : f16_drift) = max_diff;
  }
  CHECK(f16_drift * 4 < bf16_drift);  // the finer format drifts less: the drift is the rounding's
}

TEST_CASE("sequences batched together (prefill chunks mixed with decodes) give the same tokens as alone") {
  const auto& g = load_golden();
  struct request {
    std::vector<int32_t> prompt;
    int64_t max_tokens;
    int64_t arrives_at_step;
    std::vector<int32_t> expected;
    std::vector<int32_t> block_table;
    std::vector<int32_t> output;
    int64_t prefilled = 0;
  };
  std::vector<request> reqs;
  reqs.push_back({g.prompts[0].prompt_ids, 40, 0, {}, {}, {}});
  reqs.push_back({g.prompts[1].prompt_ids, 30, 0, {}, {}, {}});
  reqs.push_back({{1}, 50, 2, {}, {}, {}});
  // A long prompt: the BOS golden continuation's first 70 tokens, so its prefill spans many chunks.
  std::vector<int32_t> long_prompt{1};
  long_prompt.insert(long_prompt.end(), g.bos_output_ids.begin(), g.bos_output_ids.begin() + 70);
  reqs.push_back({long_prompt, 20, 1, {}, {}, {}});

  {
    stories_model alone;
    for (auto& r : reqs)
      r.expected = alone.greedy(r.prompt, r.max_tokens);
  }
  CHECK(reqs[0].expected ==
        std::vector<int32_t>(g.prompts[0].greedy_output_ids.begin(), g.prompts[0].greedy_output_ids.begin() + 40));

  // Shuffled, non-contiguous blocks out of one shared pool.
  stories_model batched{64};
  std::vector<int32_t> free_blocks(64);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), std::mt19937{42});
  for (auto& r : reqs) {
    int64_t need = (static_cast<int64_t>(r.prompt.size()) + r.max_tokens + 15) / 16;
    for (int64_t i = 0; i < need; ++i) {
      r.block_table.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
  }
  // A tiny continuous-batching loop: decodes first, then prefill chunks under a 7-token budget per step.
  const int64_t budget = 7;
  const int64_t vocab = batched.llm.config().n_vocab;
  int mixed_steps = 0;
  for (int64_t step = 0; step < 500; ++step) {
    model::forward_batch fb;
    std::vector<size_t> sampled;  // request index per sample row
    int64_t used = 0;
    bool has_decode = false, has_prefill = false;
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto& r = reqs[i];
      bool prefill_done = r.prefilled == static_cast<int64_t>(r.prompt.size());
      if (step < r.arrives_at_step || !prefill_done || r.output.empty() ||
          static_cast<int64_t>(r.output.size()) >= r.max_tokens)
        continue;
      int32_t tok[1] = {r.output.back()};
      fb.add_sequence(tok, static_cast<int32_t>(r.prompt.size() + r.output.size() - 1), r.block_table, true);
      sampled.push_back(i);
      ++used;
      has_decode = true;
    }
    for (size_t i = 0; i < reqs.size() && used < budget; ++i) {
      auto& r = reqs[i];
      auto remaining = static_cast<int64_t>(r.prompt.size()) - r.prefilled;
      if (step < r.arrives_at_step || remaining == 0)
        continue;
      int64_t len = std::min(remaining, budget - used);
      bool last_chunk = len == remaining;
      fb.add_sequence(
          std::span<const int32_t>{r.prompt}.subspan(static_cast<size_t>(r.prefilled), static_cast<size_t>(len)),
          static_cast<int32_t>(r.prefilled), r.block_table, last_chunk);
      r.prefilled += len;
      used += len;
      if (last_chunk)
        sampled.push_back(i);
      has_prefill = true;
    }
    if (fb.n_tokens() == 0) {
      bool all_done = std::all_of(reqs.begin(), reqs.end(), [](const request& r) {
        return static_cast<int64_t>(r.output.size()) >= r.max_tokens;
      });
      if (all_done)
        break;
      continue;
    }
    mixed_steps += has_decode && has_prefill ? 1 : 0;
    auto logits = batched.llm.forward(fb, batched.cache);
    REQUIRE(logits.size() == sampled.size() * static_cast<size_t>(vocab));
    for (size_t k = 0; k < sampled.size(); ++k)
      reqs[sampled[k]].output.push_back(argmax(logits.data() + k * static_cast<size_t>(vocab), vocab));
  }
  CHECK(mixed_steps > 5);  // the schedule really mixed prefill chunks with decodes
  for (const auto& r : reqs)
    CHECK(r.output == r.expected);
}

TEST_CASE("tensor-parallel shards (tp 2, 4, 8: kv heads split or replicated, uneven MLP) reproduce the golden tokens") {
  const auto& g = load_golden();
  const auto& p = g.prompts[1];
  for (auto [tp, kv] : {std::pair{2, dtype::f32}, std::pair{4, dtype::f32}, std::pair{8, dtype::f32},
                        std::pair{2, dtype::bf16}, std::pair{4, dtype::bf16}, std::pair{8, dtype::bf16}}) {
    auto grp = std::make_shared<comm::shared_memory_group>(tp);
    std::vector<std::vector<int32_t>> outputs(static_cast<size_t>(tp));
    std::vector<std::thread> ranks;
    for (int r = 0; r < tp; ++r) {
      ranks.emplace_back([&, r] {
        cpu::cpu_backend be{1};
        comm::shared_memory_collective comm{grp, r};
        model::shard_spec shard;
        shard.tp_rank = r;
        shard.tp_size = tp;
        auto loaded = model::load_shard(test::model_dir("stories260K"), shard, {});
        model::llama_model llm{loaded.config, std::move(loaded.weights), shard, comm, be};
        model::kv_cache cache{be, with_kv_dtype(llm, kv).cache_shape(16), 8};
        std::vector<int32_t> table{7, 3, 5, 1, 0, 2, 4, 6};
        std::vector<int32_t> out;
        model::forward_batch fb;
        fb.add_sequence(p.prompt_ids, 0, table, true);
        auto logits = llm.forward(fb, cache);
        for (size_t i = 0; i < p.greedy_output_ids.size(); ++i) {
          out.push_back(argmax(logits.data(), loaded.config.n_vocab));
          model::forward_batch next;
          int32_t tok[1] = {out.back()};
          next.add_sequence(tok, static_cast<int32_t>(p.prompt_ids.size() + out.size() - 1), table, true);
          logits = llm.forward(next, cache);
        }
        outputs[static_cast<size_t>(r)] = out;
      });
    }
    for (auto& t : ranks)
      t.join();
    for (int r = 0; r < tp; ++r) {
      INFO("tp " << tp << " rank " << r << " kv " << dtype_name(kv));
      CHECK(outputs[static_cast<size_t>(r)] == p.greedy_output_ids);
    }
  }
}

TEST_CASE("pipeline stages (layers 0-2 then 3-4) chained by hidden states reproduce the golden tokens") {
  const auto& p = load_golden().prompts[0];
  for (dtype kv : {dtype::f32, dtype::bf16}) {
    CAPTURE(dtype_name(kv));
    cpu::cpu_backend be{2};
    single_rank_collective comm;
    model::shard_spec s0, s1;
    s0.layer_begin = 0;
    s0.layer_end = 3;
    s1.layer_begin = 3;
    s1.layer_end = 5;
    auto l0 = model::load_shard(test::model_dir("stories260K"), s0, {});
    auto l1 = model::load_shard(test::model_dir("stories260K"), s1, {});
    model::llama_model stage0{l0.config, std::move(l0.weights), s0, comm, be};
    model::llama_model stage1{l1.config, std::move(l1.weights), s1, comm, be};
    CHECK(stage0.is_first_stage());
    CHECK(!stage0.is_last_stage());
    CHECK(stage1.is_last_stage());
    model::kv_cache c0{be, with_kv_dtype(stage0, kv).cache_shape(16), 8},
        c1{be, with_kv_dtype(stage1, kv).cache_shape(16), 8};
    std::vector<int32_t> table{0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<int32_t> out;
    model::forward_batch fb;
    fb.add_sequence(p.prompt_ids, 0, table, true);
    auto logits = stage1.forward(fb, c1, stage0.forward(fb, c0));
    for (size_t i = 0; i < p.greedy_output_ids.size(); ++i) {
      out.push_back(argmax(logits.data(), l0.config.n_vocab));
      model::forward_batch next;
      int32_t tok[1] = {out.back()};
      next.add_sequence(tok, static_cast<int32_t>(p.prompt_ids.size() + out.size() - 1), table, true);
      logits = stage1.forward(next, c1, stage0.forward(next, c0));
    }
    CHECK(out == p.greedy_output_ids);
  }
}

TEST_CASE("forward_batch::validate names what is inconsistent") {
  model::forward_batch fb;
  std::vector<int32_t> toks{1, 2, 3};
  fb.add_sequence(toks, 0, {0}, true);
  CHECK(fb.validate(16, 4).empty());
  CHECK(fb.validate(16, 0).find("block 0 outside") != std::string::npos);
  CHECK(fb.validate(2, 4).find("position 2 beyond") != std::string::npos);
  fb.sample_rows.push_back(9);
  CHECK(fb.validate(16, 4).find("sample row 9") != std::string::npos);
}

TEST_CASE(
    "biased attention (Qwen2 qkv biases, Llama o_proj bias) and Qwen3 q/k norms give the same logits at tp 1 and 2") {
  const std::vector<std::string> configs{
      R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":64,"intermediate_size":96,
          "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":101,
          "max_position_embeddings":128,"rms_norm_eps":1e-6,"rope_theta":1000000.0,"tie_word_embeddings":false,
          "torch_dtype":"float32"})",
      R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"intermediate_size":96,
          "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":101,"attention_bias":true,
          "max_position_embeddings":128,"rms_norm_eps":1e-5,"rope_theta":10000.0,"torch_dtype":"float32"})",
      R"({"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":64,"intermediate_size":96,
          "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,"vocab_size":101,
          "max_position_embeddings":128,"rms_norm_eps":1e-6,"rope_theta":1000000.0,"tie_word_embeddings":true,
          "torch_dtype":"float32"})"};
  for (const auto& config : configs) {
    auto dir = test::make_temp_dir("actorllm-bias");
    {
      std::ofstream f{dir / "config.json"};
      f << config;
    }
    model::load_options load;
    load.format = model::load_format::dummy;
    load.seed = 5;
    std::vector<int32_t> prompt{3, 14, 15, 92, 65, 35, 89, 79};
    std::vector<int32_t> table{1, 0};
    auto run = [&](int tp) {
      auto grp = std::make_shared<comm::shared_memory_group>(tp);
      std::vector<std::vector<float>> logits(static_cast<size_t>(tp));
      std::vector<std::thread> ranks;
      for (int r = 0; r < tp; ++r)
        ranks.emplace_back([&, r] {
          cpu::cpu_backend be{1};
          comm::shared_memory_collective comm{grp, r};
          model::shard_spec shard;
          shard.tp_rank = r;
          shard.tp_size = tp;
          auto loaded = model::load_shard(dir, shard, load);
          model::llama_model llm{loaded.config, std::move(loaded.weights), shard, comm, be};
          model::kv_cache cache{be, llm.cache_shape(16), 2};
          model::forward_batch fb;
          fb.add_sequence(prompt, 0, table, true);
          logits[static_cast<size_t>(r)] = llm.forward(fb, cache);
        });
      for (auto& t : ranks)
        t.join();
      return logits[0];
    };
    auto one = run(1);
    auto two = run(2);
    REQUIRE(one.size() == 101);
    REQUIRE(two.size() == one.size());
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < one.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(one[i] - two[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(one[i])));
    }
    INFO(config);
    CHECK(max_abs > 1e-3);  // the dummy model produces non-trivial logits
    CHECK(max_diff < 1e-4 * std::max(1.0, max_abs));
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("a row sampled several times (n > 1 from one prefill) gives that row's logits each time") {
  // More sample rows than tokens: the final norm and lm_head must be sized by the sampled rows (a crash before).
  stories_model m{8, 1};
  model::forward_batch batch;
  std::vector<int32_t> prompt{1, 403, 407};
  batch.add_sequence(prompt, 0, {0}, true);
  const int32_t last = batch.sample_rows.back();
  batch.sample_rows = {last, last, last, last, last};
  auto logits = m.llm.forward(batch, m.cache);
  const auto n_vocab = static_cast<size_t>(m.llm.config().n_vocab);
  REQUIRE(logits.size() == 5 * n_vocab);
  for (size_t r = 1; r < 5; ++r)
    CHECK(std::equal(logits.begin(), logits.begin() + static_cast<ptrdiff_t>(n_vocab),
                     logits.begin() + static_cast<ptrdiff_t>(r * n_vocab)));
}
