// Decode context parallelism through actorllm::LLM: a small random Llama with one kv head (so tp ranks hold copies
// of it that DCP splits by positions), prompts of a few thousand tokens; every dcp layout (tp 2 and 4, dcp 2 and 4,
// with pp 2 and an interleave of 4) gives the dcp 1 greedy ids and logprobs, the ids follow the float64 reference,
// prefix caching and preemption keep working, the KV capacity grows by dcp, and invalid sizes are refused with the
// valid ones named.
#include "actorllm/llm.hpp"
#include "model/model_config.hpp"
#include "model/model_source.hpp"
#include "model/model_test_util.hpp"
#include "model/reference_llama.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

using namespace actorllm;
namespace fs = std::filesystem;

namespace {

/// hidden 64, 4 heads of 16, 1 kv head, 2 layers, vocab 256, 8,192 positions.
constexpr const char* config_json = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 1, "vocab_size": 256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
  "tie_word_embeddings": false})";

/// The checkpoint (seeded random f32 weights), written once per process and removed at exit.
class dcp_model {
 public:
  static dcp_model& get() {
    static dcp_model m;
    return m;
  }
  const fs::path& dir() const { return dir_; }
  const model::model_config& config() const { return cfg_; }
  const model::model_weights& weights() const { return weights_; }

 private:
  dcp_model() : dir_(model::test_util::temp_dir("dcp-model")) {
    cfg_ = model::parse_model_config(config_json, "test config");
    weights_ = model::test_util::random_weights(cfg_, 23, dtype::f32);
    model::test_util::write_checkpoint(dir_, config_json, weights_);
  }

  fs::path dir_;
  model::model_config cfg_;
  model::model_weights weights_;
};

struct layout {
  int tp = 1;
  int dcp = 1;
  int pp = 1;
  int interleave = 1;
  int pcp = 1;
};

std::string describe(const layout& l) {
  return fmt::format("tp {} dcp {} pp {} interleave {} pcp {}", l.tp, l.dcp, l.pp, l.interleave, l.pcp);
}

/// Bytes of KV cache per shard that hold `tokens` positions of every sequence in `l` (block size 16, one kv head
/// of 16 floats, k and v, the shard's layers).
size_t kv_bytes_for(const layout& l, int64_t tokens) {
  const int64_t blocks = tokens / (16 * std::max(l.dcp, 1) * std::max(l.pcp, 1));  // (0 is refused, later)
  return static_cast<size_t>(blocks * 2 * (2 / l.pp) * 16 * 16 * 4);
}

engine_config config_for(const layout& l, int64_t kv_tokens = 32768) {
  engine_config c;
  c.model = dcp_model::get().dir().string();
  c.tensor_parallel_size = l.tp;
  c.pipeline_parallel_size = l.pp;
  c.decode_context_parallel_size = l.dcp;
  c.dcp_kv_cache_interleave_size = l.interleave;
  c.prefill_context_parallel_size = l.pcp;
  c.kv_cache_memory = kv_bytes_for(l, kv_tokens);
  c.max_model_len = 4096;
  c.threads = 2;
  return c;
}

/// `n` seeded token ids in [3, 256).
std::vector<int32_t> random_prompt(size_t n, uint32_t seed) {
  std::vector<int32_t> ids(n);
  uint32_t x = seed;
  for (auto& id : ids) {
    x = x * 1664525u + 1013904223u;
    id = static_cast<int32_t>(3 + (x >> 8) % 253);
  }
  return ids;
}

sampling_params greedy(int32_t max_tokens, bool logprobs = false) {
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  if (logprobs)
    p.logprobs = 0;
  return p;
}

/// Two long prompts at once (3,000 and 2,200 tokens) and a short one: their outputs with logprobs.
std::vector<completion_output> run_long(const engine_config& cfg) {
  LLM llm{cfg};
  std::vector<prompt> prompts{prompt{random_prompt(3000, 1)}, prompt{random_prompt(2200, 2)},
                              prompt{random_prompt(7, 3)}};
  std::vector<completion_output> out;
  for (auto& r : llm.generate(prompts, greedy(12, true)))
    out.push_back(r.outputs.at(0));
  CHECK(llm.stats().healthy);
  return out;
}

const std::vector<completion_output>& plain_outputs() {
  static const std::vector<completion_output> out = run_long(config_for({}));
  return out;
}

void check_same(const std::vector<completion_output>& got, const std::vector<completion_output>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("prompt " << i);
    CHECK(got[i].token_ids == want[i].token_ids);
    REQUIRE(got[i].logprobs.size() == want[i].logprobs.size());
    for (size_t t = 0; t < got[i].logprobs.size(); ++t)
      CHECK(got[i].logprobs[t].logprob == doctest::Approx(want[i].logprobs[t].logprob).epsilon(1e-4).scale(1.0));
  }
}

}  // namespace

TEST_CASE("dcp: the dcp 1 ids follow the float64 reference at 3,000 tokens of context") {
  const auto& out = plain_outputs();
  const auto& m = dcp_model::get();
  const double shortfall =
      model::test_util::worst_shortfall(m.config(), m.weights(), random_prompt(3000, 1), out.at(0).token_ids);
  INFO("worst shortfall " << shortfall);
  CHECK(shortfall <= 1e-4);
}

TEST_CASE("dcp: tp 2 and 4 with dcp 2 and 4 give the dcp 1 ids and logprobs at 3,000 tokens of context") {
  for (const layout& l : {layout{2, 2}, layout{4, 2}, layout{4, 4}, layout{4, 4, 1, 4}}) {
    INFO(describe(l));
    check_same(run_long(config_for(l)), plain_outputs());
  }
}

TEST_CASE("dcp: with pp 2 the stages' DCP groups give the dcp 1 ids") {
  const layout l{2, 2, 2};
  INFO(describe(l));
  check_same(run_long(config_for(l)), plain_outputs());
}

TEST_CASE("dcp: the KV capacity in tokens grows by dcp for the same memory per shard") {
  // The same bytes per shard at tp 4: dcp 1 keeps a copy of the one kv head on each rank, dcp 4 a quarter of it.
  engine_config one = config_for({4, 1});
  engine_config four = config_for({4, 4});
  four.kv_cache_memory = one.kv_cache_memory;
  LLM a{one};
  LLM b{four};
  const int64_t tokens_one = int64_t{a.info().n_blocks} * a.info().block_size;
  const int64_t tokens_four = int64_t{b.info().n_blocks} * b.info().block_size;
  MESSAGE("KV capacity at tp 4: dcp 1 " << tokens_one << " tokens, dcp 4 " << tokens_four << " tokens");
  CHECK(a.info().block_size == 16);
  CHECK(b.info().block_size == 64);
  CHECK(a.info().n_blocks == b.info().n_blocks);
  CHECK(tokens_four == 4 * tokens_one);
}

TEST_CASE("dcp: a shared prefix is read from the cache and gives the ids of its recompute") {
  for (const layout& l : {layout{}, layout{4, 4}}) {
    INFO(describe(l));
    LLM llm{config_for(l)};
    std::vector<int32_t> base = random_prompt(1500, 5);
    std::vector<int32_t> other = base;
    other.resize(1300);
    const auto tail = random_prompt(200, 6);
    other.insert(other.end(), tail.begin(), tail.end());
    const auto first = llm.generate(prompt{base}, greedy(8)).outputs.at(0).token_ids;
    const auto before = llm.stats().prefix_cache_hits;
    const auto second = llm.generate(prompt{other}, greedy(8)).outputs.at(0).token_ids;
    CHECK(llm.stats().prefix_cache_hits > before);
    // Recomputed without the cache: the same ids.
    engine_config no_cache = config_for(l);
    no_cache.enable_prefix_caching = false;
    LLM fresh{no_cache};
    CHECK(fresh.generate(prompt{other}, greedy(8)).outputs.at(0).token_ids == second);
    CHECK(fresh.generate(prompt{base}, greedy(8)).outputs.at(0).token_ids == first);
  }
}

TEST_CASE("dcp: preempted sequences resume with the ids they get alone") {
  // 4,608 positions of cache: two 2,200-token prompts fit, their 300 more tokens each do not: one is preempted.
  std::vector<std::vector<int32_t>> alone;
  for (const layout& l : {layout{}, layout{2, 2}, layout{4, 4}}) {
    INFO(describe(l));
    LLM llm{config_for(l, 4608)};
    const std::vector<prompt> prompts{prompt{random_prompt(2200, 8)}, prompt{random_prompt(2200, 9)}};
    const auto together = llm.generate(prompts, greedy(300));
    CHECK(llm.stats().n_preemptions > 0);
    std::vector<std::vector<int32_t>> ids;
    for (const auto& r : together)
      ids.push_back(r.outputs.at(0).token_ids);
    if (alone.empty()) {
      for (const auto& p : prompts)
        alone.push_back(llm.generate(p, greedy(300)).outputs.at(0).token_ids);
    }
    CHECK(ids == alone);
  }
}

TEST_CASE(
    "pcp: copies of the TP group split the rows (pcp 2 and 4, with tp 2, dcp 2 and pp 2) and give the dcp 1 "
    "ids and logprobs") {
  for (const layout& l : {layout{1, 1, 1, 1, 2}, layout{1, 1, 1, 1, 4}, layout{2, 1, 1, 1, 2}, layout{2, 2, 1, 1, 2},
                          layout{2, 2, 2, 1, 2}, layout{4, 4, 1, 4, 2}}) {
    INFO(describe(l));
    check_same(run_long(config_for(l)), plain_outputs());
  }
}

TEST_CASE("pcp: the KV capacity grows by pcp x dcp, prefix caching and preemption keep their ids") {
  engine_config one = config_for({2, 1});
  engine_config shared = config_for({2, 2, 1, 1, 2});
  shared.kv_cache_memory = one.kv_cache_memory;
  {
    LLM a{one};
    LLM b{shared};
    CHECK(b.info().block_size == 64);
    CHECK(int64_t{b.info().n_blocks} * b.info().block_size == 4 * int64_t{a.info().n_blocks} * a.info().block_size);
  }
  LLM llm{config_for({1, 1, 1, 1, 2})};
  std::vector<int32_t> base = random_prompt(1500, 5);
  std::vector<int32_t> other(base.begin(), base.begin() + 1300);
  const auto tail = random_prompt(200, 6);
  other.insert(other.end(), tail.begin(), tail.end());
  (void)llm.generate(prompt{base}, greedy(8));
  const auto before = llm.stats().prefix_cache_hits;
  const auto second = llm.generate(prompt{other}, greedy(8)).outputs.at(0).token_ids;
  CHECK(llm.stats().prefix_cache_hits > before);
  LLM plain{config_for({})};
  CHECK(plain.generate(prompt{other}, greedy(8)).outputs.at(0).token_ids == second);

  LLM small{config_for({1, 1, 1, 1, 2}, 4608)};
  const std::vector<prompt> prompts{prompt{random_prompt(2200, 8)}, prompt{random_prompt(2200, 9)}};
  const auto together = small.generate(prompts, greedy(300));
  CHECK(small.stats().n_preemptions > 0);
  for (size_t i = 0; i < prompts.size(); ++i)
    CHECK(together[i].outputs.at(0).token_ids == plain.generate(prompts[i], greedy(300)).outputs.at(0).token_ids);
}

TEST_CASE("dcp: sizes the kv heads cannot take are refused before anything loads, naming the valid ones") {
  auto refused = [](const layout& l, const std::string& needle) {
    INFO(describe(l) << " expecting: " << needle);
    try {
      LLM llm{config_for(l)};
      FAIL("the engine started");
    } catch (const error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK_MESSAGE(std::string{e.what()}.find(needle) != std::string::npos, e.what());
    }
  };
  refused({4, 3}, "valid sizes: 1, 2, 4");
  refused({2, 4}, "valid sizes: 1, 2");
  refused({1, 2}, "decode_context_parallel_size 2 cannot split the KV cache of 1 kv heads at tensor_parallel_size 1");
  refused({4, 0}, "decode_context_parallel_size must be at least 1, got 0");
  refused({2, 2, 1, 3}, "dcp_kv_cache_interleave_size must be at least 1 and divide block_size (16), got 3");
  refused({1, 1, 1, 1, 0}, "prefill_context_parallel_size must be at least 1, got 0");
  engine_config lora = config_for({1, 1, 1, 1, 2});
  lora.enable_lora = true;
  try {
    LLM llm{lora};
    FAIL("the engine started");
  } catch (const error& e) {
    CHECK_MESSAGE(std::string{e.what()}.find("prefill_context_parallel_size 2 with enable_lora: prefill context "
                                             "parallelism runs with dense models, without LoRA") != std::string::npos,
                  e.what());
  }
  // stories260K has 4 kv heads: at tp 8 each is held twice, so dcp 2 is the most it takes.
  engine_config stories;
  stories.model = test::model_dir("stories260K").string();
  stories.tensor_parallel_size = 8;
  stories.decode_context_parallel_size = 4;
  try {
    LLM llm{stories};
    FAIL("the engine started");
  } catch (const error& e) {
    CHECK_MESSAGE(std::string{e.what()}.find("valid sizes: 1, 2") != std::string::npos, e.what());
  }
}
