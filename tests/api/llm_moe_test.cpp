// MoE models through the engine (actorllm::LLM, uni executor): a dummy-weight Mixtral-style model gives the same
// greedy ids under tp 1, tp 2 and expert parallelism over tp 2 and 4, and with dp 2 lockstep replicas whose EP group
// spans both (busy or idle); the per-expert load reaches the stats that /metrics exports; lockstep DP+EP where it
// cannot run is refused by name; expert-parallel load balancing (--enable-eplb) keeps the ids while experts move, and
// settings it cannot run are refused by name.
#include "actorllm/llm.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>

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
    // The all-to-all's bytes are counted only where tokens leave their rank for their experts: expert parallelism
    // over more than one rank (the rows of n_embd floats go out and come back, so at least that many bytes).
    if (ep && tp > 1)
      CHECK(s.ep_exchange_bytes >= uint64_t{64} * 4);
    else
      CHECK(s.ep_exchange_bytes == 0);
  }
}

TEST_CASE("lockstep DP+EP: dp 2 x tp 2 over one expert-parallel group of 4 gives the tp 1 ids, busy or idle") {
  moe_dir dir;
  const std::vector<int32_t> ids = test_prompt();
  sampling_params longer = greedy_24();
  longer.max_tokens = 40;
  std::vector<int32_t> reference, reference_long;
  {
    LLM one{moe_config(dir, 1, false)};
    reference = one.generate(prompt{ids}, greedy_24()).outputs.at(0).token_ids;
    reference_long = one.generate(prompt{ids}, longer).outputs.at(0).token_ids;
  }
  for (int tp : {1, 2}) {
    INFO("dp 2 x tp " << tp);
    engine_config c = moe_config(dir, tp, true);
    c.data_parallel_size = 2;
    c.step_timeout = 60;  // a step whose exchange never found its partners fails the test instead of hanging it
    LLM llm{c};
    // One request: replica 0 runs it, replica 1 has nothing and runs idle steps so that its experts serve it.
    CHECK(llm.generate(prompt{ids}, greedy_24()).outputs.at(0).token_ids == reference);
    // Two together (one per replica), then a longer one alone (replica 0 or 1 idles throughout, whichever has it).
    auto both = llm.generate(std::vector<prompt>{prompt{ids}, prompt{ids}}, greedy_24());
    REQUIRE(both.size() == 2);
    CHECK(both[0].outputs.at(0).token_ids == reference);
    CHECK(both[1].outputs.at(0).token_ids == reference);
    auto long_out = llm.generate(std::vector<prompt>{prompt{ids}}, longer);
    CHECK(long_out.at(0).outputs.at(0).token_ids == reference_long);
    const engine_stats s = llm.stats();
    REQUIRE(s.replicas.size() == 2);
    CHECK(s.replicas[0].healthy);
    CHECK(s.replicas[1].healthy);
    CHECK(s.replicas[0].routed_requests + s.replicas[1].routed_requests == 4);
    CHECK(s.replicas[0].routed_requests >= 1);
    CHECK(s.replicas[1].routed_requests >= 1);
    // Each replica counts the routing of its own tokens; the sum is every token's 2 experts in each of the 2 layers.
    REQUIRE(s.expert_tokens.size() == 8);
    CHECK(std::accumulate(s.expert_tokens.begin(), s.expert_tokens.end(), uint64_t{0}) ==
          ((6 + 23) * 3 + (6 + 39)) * 2 * 2);
  }
}

TEST_CASE("lockstep DP+EP: one replica's failure restarts the whole set, whose replicas then serve the same ids") {
  // A larger model, so that each layer of a 4000-token prefill takes far longer than the step timeout (seconds on
  // this 2-core machine, against 1 s) while a decode step stays far below it (tens of ms): the prefill's replica
  // fails by the step timeout, as a hung shard would. Per layer, because the watchdog restarts a step's clock at every
  // layer a forward pass finishes in this process (engine/step_watch.hpp): a step slow but progressing is not lost.
  // It is the engine's first step: once steps have run, the timeout stretches for a step of many tokens by the pace
  // they ran at (engine/step_pace.hpp), and the prefill would be given its time.
  const auto dir = test::make_temp_dir("actorllm-lockstep-restart");
  {
    std::ofstream f{dir / "config.json"};
    f << R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 1024, "intermediate_size": 4096,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 97,
        "max_position_embeddings": 8192, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": null,
        "torch_dtype": "bfloat16"})";
  }
  engine_config c;
  c.model = dir.string();
  c.load_format = "dummy";
  c.seed = 4;
  c.enable_expert_parallel = true;
  c.data_parallel_size = 2;
  c.kv_cache_memory = size_t{96} << 20;
  c.max_model_len = 4096;
  c.max_num_batched_tokens = 8192;
  c.threads = 2;
  c.step_timeout = 1.0;
  const std::vector<int32_t> short_prompt = test_prompt();
  sampling_params p = greedy_24();
  p.max_tokens = 8;
  const auto before = LLM{c}.generate(prompt{short_prompt}, p).outputs.at(0).token_ids;  // another engine, same seed
  REQUIRE(before.size() == 8);
  LLM llm{c};

  std::vector<int32_t> long_prompt(4000);
  for (size_t i = 0; i < long_prompt.size(); ++i)
    long_prompt[i] = static_cast<int32_t>(3 + (i * 7) % 90);
  sampling_params one = p;
  one.max_tokens = 1;
  try {
    llm.generate(prompt{long_prompt}, one);
    FAIL("a 4000-token prefill finished with no layer past the 1 s step timeout: the test cannot tell a failure");
  } catch (const error& e) {
    // It resumed once after the set's restart, and failed the set again: then it fails, as a request that may be what
    // fails the set.
    MESSAGE("the long request: " << std::string{e.what()});
    CHECK(e.code() == errc::engine_failure);
    CHECK(std::string{e.what()}.find("resumed after a restart of its expert-parallel set already") !=
          std::string::npos);
  }
  // Both replicas restart together, twice (the first restart at once); wait until they serve again.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
  engine_stats s = llm.stats();
  while (!(s.replicas.at(0).healthy && s.replicas.at(1).healthy) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
    s = llm.stats();
  }
  REQUIRE(s.replicas.at(0).healthy);
  REQUIRE(s.replicas.at(1).healthy);
  CHECK(s.replicas[0].restarts == 2);
  CHECK(s.replicas[1].restarts == 2);
  const auto after = llm.generate(std::vector<prompt>{prompt{short_prompt}, prompt{short_prompt}}, p);
  CHECK(after.at(0).outputs.at(0).token_ids == before);
  CHECK(after.at(1).outputs.at(0).token_ids == before);
  std::filesystem::remove_all(dir);
}

TEST_CASE("lockstep DP+EP is refused by name where the replicas cannot step together") {
  moe_dir dir;
  auto refused = [&](engine_config c, const char* what) {
    INFO(what);
    try {
      LLM llm{c};
      FAIL("the engine started");
    } catch (const error& e) {
      CHECK(e.code() == errc::invalid_config);
      const std::string msg = e.what();
      CHECK(msg.find("enable_expert_parallel") != std::string::npos);
      CHECK(msg.find(what) != std::string::npos);
    }
  };
  // On the CPU: on a GPU host the device count would decide the executor first.
  engine_config pp2 = moe_config(dir, 1, true, 2);
  pp2.device = "cpu";
  pp2.data_parallel_size = 2;
  refused(pp2, "pipeline_parallel_size 2");
  engine_config rank = moe_config(dir, 1, true);
  rank.device = "cpu";
  rank.data_parallel_size = 2;
  rank.data_parallel_rank = 1;
  refused(rank, "data_parallel_rank 1");
  engine_config too_many = moe_config(dir, 4, true);
  too_many.device = "cpu";
  too_many.data_parallel_size = 4;
  refused(too_many, "16 expert-parallel ranks are more than the model's 8 experts");
}

TEST_CASE("EPLB: expert parallelism over tp 4 and lockstep dp 2 x tp 2 give the tp 1 ids while experts move") {
  moe_dir dir;
  const std::vector<int32_t> ids = test_prompt();
  sampling_params longer = greedy_24();
  longer.max_tokens = 40;
  std::vector<int32_t> reference, reference_long;
  {
    LLM one{moe_config(dir, 1, false)};
    reference = one.generate(prompt{ids}, greedy_24()).outputs.at(0).token_ids;
    reference_long = one.generate(prompt{ids}, longer).outputs.at(0).token_ids;
  }
  for (int dp : {1, 2}) {
    const int tp = dp == 1 ? 4 : 2;
    INFO("dp " << dp << " x tp " << tp);
    engine_config c = moe_config(dir, tp, true);
    c.data_parallel_size = dp;
    c.step_timeout = 60;
    c.enable_eplb = true;
    c.eplb = eplb_config{8, 6, 4, true};  // 12 slots, 3 per rank; a rearrangement every 6 steps
    LLM llm{c};
    CHECK(llm.generate(prompt{ids}, greedy_24()).outputs.at(0).token_ids == reference);
    auto both = llm.generate(std::vector<prompt>{prompt{ids}, prompt{ids}}, greedy_24());
    REQUIRE(both.size() == 2);
    CHECK(both[0].outputs.at(0).token_ids == reference);
    CHECK(both[1].outputs.at(0).token_ids == reference);
    CHECK(llm.generate(prompt{ids}, longer).outputs.at(0).token_ids == reference_long);
    // At least 24 + 24 + 40 steps ran (more with idle lockstep steps): 14 rearrangements or more, each reported.
    const engine_stats s = llm.stats();
    CHECK(s.eplb.rearrangements >= 14);
    CHECK(s.eplb.last_stall_seconds > 0);
    CHECK(s.eplb.tokens_per_rank_mean_before > 0);
    CHECK(s.eplb.tokens_per_rank_max_before >= s.eplb.tokens_per_rank_mean_before);
    CHECK(s.eplb.tokens_per_rank_max_after >= s.eplb.tokens_per_rank_mean_after);
    CHECK(s.eplb.tokens_per_rank_max_after <= s.eplb.tokens_per_rank_max_before * 1.5);
  }
}

TEST_CASE("EPLB settings the engine cannot run are refused by name before anything loads") {
  moe_dir dir;
  auto refused = [&](engine_config c, const char* what) {
    INFO(what);
    try {
      LLM llm{c};
      FAIL("the engine started");
    } catch (const error& e) {
      CHECK(e.code() == errc::invalid_config);
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find(what) != std::string::npos, msg);
    }
  };
  engine_config no_ep = moe_config(dir, 2, false);
  no_ep.enable_eplb = true;
  refused(no_ep, "enable_eplb (--enable-eplb) needs enable_expert_parallel");
  engine_config one_rank = moe_config(dir, 1, true);
  one_rank.enable_eplb = true;
  refused(one_rank, "needs more than one expert-parallel rank");
  engine_config uneven = moe_config(dir, 4, true);
  uneven.enable_eplb = true;
  uneven.eplb.num_redundant_experts = 2;
  refused(uneven,
          "the model's 8 experts plus eplb_config.num_redundant_experts 2 make 10 physical experts, which do "
          "not divide over the 4 expert-parallel ranks");
  engine_config window = moe_config(dir, 2, true);
  window.enable_eplb = true;
  window.eplb.window_size = 0;
  refused(window, "eplb_config.window_size must be at least 1, got 0");
  engine_config crowded = moe_config(dir, 2, true);
  crowded.enable_eplb = true;
  crowded.eplb.num_redundant_experts = 10;
  refused(crowded, "more than the model's 8 experts");
  engine_config fp8 = moe_config(dir, 2, true);
  fp8.enable_eplb = true;
  fp8.quantization = "fp8";
  refused(fp8, "enable_eplb with quantized weights");
}
