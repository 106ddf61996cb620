// MoE models through the engine (actorllm::LLM, uni executor): a dummy-weight Mixtral-style model gives the same
// greedy ids under tp 1, tp 2 and expert parallelism over tp 2 and 4, and with dp 2 replicas each with EP over tp 2;
// the per-expert load reaches the stats that /metrics exports; --enable-eplb is refused by name.
#include "actorllm/llm.hpp"
#include "test_paths.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

using namespace actorllm;

namespace {

struct moe_dir {
  moe_dir() : path{test::make_temp_dir("actorllm-llm-moe")} {
    std::ofstream f{path / "config.json"};
    f << R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64,
        "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 97, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
        "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": null, "tie_word_embeddings": false,
        "torch_dtype": "float32"})";
  }
  ~moe_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
};

engine_config moe_config(const moe_dir& dir, int tp, bool ep, int pp = 1) {
  engine_config c;
  c.model = dir.path.string();
  c.load_format = "dummy";
  c.seed = 3;
  c.tensor_parallel_size = tp;
  c.pipeline_parallel_size = pp;
  c.enable_expert_parallel = ep;
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 2;
  return c;
}

/// 24 greedy tokens, whatever they are (the dummy model's eos must not end them early).
sampling_params greedy_24() {
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 24;
  return p;
}

std::vector<int32_t> test_prompt() { return {5, 17, 3, 88, 41, 9}; }

}  // namespace

TEST_CASE("a dummy Mixtral gives the same greedy ids under tp 1/2, pp 2 and expert parallelism over tp 2 and 4") {
  moe_dir dir;
  const sampling_params p = greedy_24();
  const std::vector<int32_t> ids = test_prompt();
  std::vector<int32_t> reference;
  struct layout {
    int tp;
    bool ep;
    int pp;
  };
  for (auto [tp, ep, pp] : {layout{1, false, 1}, layout{2, false, 1}, layout{2, true, 1}, layout{4, true, 1},
                            layout{1, false, 2}, layout{2, true, 2}}) {
    INFO("tp " << tp << " pp " << pp << (ep ? " with expert parallelism" : ""));
    LLM llm{moe_config(dir, tp, ep, pp)};
    const auto out = llm.generate(prompt{ids}, p).outputs.at(0).token_ids;
    REQUIRE(out.size() == 24);
    if (reference.empty())
      reference = out;
    CHECK(out == reference);
    // Every token of every step picked 2 experts in each of the 2 MoE layers (on one stage or two): 6 prompt + 23
    // decoded tokens ran.
    const engine_stats s = llm.stats();
    REQUIRE(s.expert_tokens.size() == 8);
    CHECK(std::accumulate(s.expert_tokens.begin(), s.expert_tokens.end(), uint64_t{0}) == (6 + 23) * 2 * 2);
  }
}

TEST_CASE("a dummy Mixtral with dp 2 and expert parallelism over tp 2: both replicas give the tp 1 ids") {
  moe_dir dir;
  const sampling_params p = greedy_24();
  const std::vector<int32_t> ids = test_prompt();
  std::vector<int32_t> reference;
  {
    LLM one{moe_config(dir, 1, false)};
    reference = one.generate(prompt{ids}, p).outputs.at(0).token_ids;
  }
  engine_config c = moe_config(dir, 2, true);
  c.data_parallel_size = 2;
  LLM llm{c};
  // Submitted together, so the router gives one to each replica (each replica's EP group is its own TP group).
  const auto out = llm.generate(std::vector<prompt>{prompt{ids}, prompt{ids}}, p);
  REQUIRE(out.size() == 2);
  CHECK(out[0].outputs.at(0).token_ids == reference);
  CHECK(out[1].outputs.at(0).token_ids == reference);
  const engine_stats s = llm.stats();
  REQUIRE(s.replicas.size() == 2);
  CHECK(s.replicas[0].routed_requests == 1);
  CHECK(s.replicas[1].routed_requests == 1);
}

TEST_CASE("--enable-eplb is refused by name before anything loads") {
  moe_dir dir;
  engine_config c = moe_config(dir, 1, true);
  c.enable_eplb = true;
  try {
    LLM llm{c};
    FAIL("the engine started");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_config);
    CHECK(std::string{e.what()}.find("enable_eplb") != std::string::npos);
  }
}
