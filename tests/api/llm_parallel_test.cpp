// Acceptance 1 of the actor engine: stories260K, greedy, gives the golden ids (and the (1,1) run's) for every
// tensor- and pipeline-parallel layout, with prefix caching on and off (with it on, the batched second pass reads
// every prompt's full blocks from the cache), and a layout the heads cannot take fails at once naming the numbers.
#include "actorllm/llm.hpp"
#include "support/golden_ids.hpp"
#include "support/test_paths.hpp"

#include "kernels/device.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <chrono>
#include <filesystem>
#include <utility>

using namespace actorllm;

namespace {

struct golden_case {
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
};

std::vector<int32_t> ints(simdjson::dom::element e) {
  std::vector<int32_t> out;
  for (auto v : e.get_array())
    out.push_back(static_cast<int32_t>(int64_t(v)));
  return out;
}

const std::vector<golden_case>& golden() {
  static const std::vector<golden_case> cases = [] {
    simdjson::dom::parser parser;
    auto doc = parser.load((test::model_dir("stories260K") / "reference" / "expected_outputs.json").string());
    std::vector<golden_case> out;
    out.push_back({ints(doc["greedy_from_bos"]["prompt_ids"]), ints(doc["greedy_from_bos"]["output_ids"])});
    for (auto p : doc["prompts"].get_array())
      out.push_back({ints(p["prompt_ids"]), ints(p["greedy_output_ids"])});
    return out;
  }();
  return cases;
}

engine_config stories_config(int tp, int pp, std::string partition = {}, bool prefix_caching = true) {
  engine_config c;
  c.enable_prefix_caching = prefix_caching;
  c.model = test::model_dir("stories260K").string();
  c.tensor_parallel_size = tp;
  c.pipeline_parallel_size = pp;
  c.pp_layer_partition = std::move(partition);
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 2;
  return c;
}

// Runs the golden prompts together through one engine (ignore_eos: the golden runs are fixed-length).
std::vector<std::vector<int32_t>> run_golden(const engine_config& cfg) {
  LLM llm{cfg};
  std::vector<prompt> prompts;
  for (const auto& g : golden())
    prompts.emplace_back(g.prompt);
  std::vector<std::vector<int32_t>> ids;
  // One call per length: max_tokens is per call, and every prompt's golden output has its own length.
  for (size_t i = 0; i < golden().size(); ++i) {
    sampling_params p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = static_cast<int32_t>(golden()[i].output.size());
    ids.push_back(llm.generate(prompts[i], p).outputs.at(0).token_ids);
  }
  // And all at once, batched, with the longest length: every golden output is a prefix of its run.
  sampling_params all;
  all.temperature = 0;
  all.ignore_eos = true;
  all.max_tokens = 256;
  auto batched = llm.generate(prompts, all);
  for (size_t i = 0; i < golden().size(); ++i) {
    const auto& out = batched.at(i).outputs.at(0).token_ids;
    REQUIRE(out.size() == 256);
    CHECK(std::vector<int32_t>(out.begin(), out.begin() + static_cast<ptrdiff_t>(ids[i].size())) == ids[i]);
  }
  // Each batched run cut after 48 output tokens, as a prompt: greedy decoding continues it with the run's next
  // tokens. With prefix caching its full blocks come from the batched run's own (prompt and output) blocks.
  std::vector<prompt> cut_prompts;
  for (size_t i = 0; i < golden().size(); ++i) {
    std::vector<int32_t> ids_cut = golden()[i].prompt;
    const auto& out = batched.at(i).outputs.at(0).token_ids;
    ids_cut.insert(ids_cut.end(), out.begin(), out.begin() + 48);
    cut_prompts.emplace_back(std::move(ids_cut));
  }
  sampling_params cont = all;
  cont.max_tokens = 32;
  auto continued = llm.generate(cut_prompts, cont);
  for (size_t i = 0; i < golden().size(); ++i) {
    const auto& out = batched.at(i).outputs.at(0).token_ids;
    CHECK(continued.at(i).outputs.at(0).token_ids == std::vector<int32_t>(out.begin() + 48, out.begin() + 80));
  }
  auto stats = llm.stats();
  CHECK(stats.n_free_blocks == stats.n_blocks);
  CHECK(stats.healthy);
  if (cfg.enable_prefix_caching)
    CHECK(stats.prefix_cache_hits > 0);
  else
    CHECK(stats.prefix_cache_queries == 0);
  return ids;
}

}  // namespace

TEST_CASE("stories260K greedy: every (tp, pp) layout gives the golden ids and the (1,1) run's") {
  const auto reference = run_golden(stories_config(1, 1));
  for (size_t i = 0; i < golden().size(); ++i)
    CHECK(reference[i] == golden()[i].output);
  struct layout {
    int tp, pp;
  };
  for (layout l :
       {layout{1, 1}, layout{2, 1}, layout{4, 1}, layout{1, 2}, layout{1, 3}, layout{1, 5}, layout{2, 2}, layout{4, 2}})
    for (bool caching : {true, false}) {
      INFO("tp " << l.tp << " pp " << l.pp << " prefix caching " << caching);
      if (l.tp * l.pp > 1 || !caching)
        CHECK(run_golden(stories_config(l.tp, l.pp, {}, caching)) == reference);
    }
}

TEST_CASE("stories260K greedy with a bf16 KV cache: the golden ids, and every (tp, pp) layout the tp1 run's") {
  engine_config one = stories_config(1, 1);
  one.kv_cache_dtype = "bfloat16";
  const auto reference = run_golden(one);
  for (size_t i = 0; i < golden().size(); ++i)
    CHECK(reference[i] == golden()[i].output);
  struct layout {
    int tp, pp;
  };
  for (layout l : {layout{2, 1}, layout{4, 1}, layout{8, 1}, layout{1, 2}, layout{1, 5}, layout{2, 2}}) {
    INFO("tp " << l.tp << " pp " << l.pp);
    engine_config cfg = stories_config(l.tp, l.pp);
    cfg.kv_cache_dtype = "bfloat16";
    CHECK(run_golden(cfg) == reference);
  }
}

TEST_CASE("a bf16 KV cache holds twice the tokens of an f32 one in the same kv_cache_memory") {
  // stories260K's f32 block: 2 (k, v) x 5 layers x 16 slots x 4 kv heads x 8 x 4 bytes = 20480 bytes.
  engine_config f32 = stories_config(1, 1);
  f32.kv_cache_memory = size_t{20480} * 200;
  engine_config bf16 = f32;
  f32.kv_cache_dtype = "float32";
  bf16.kv_cache_dtype = "bfloat16";
  const int64_t f32_blocks = LLM{f32}.stats().n_blocks, bf16_blocks = LLM{bf16}.stats().n_blocks;
  MESSAGE(f32.kv_cache_memory << " bytes of KV cache: " << f32_blocks << " blocks f32, " << bf16_blocks
                              << " blocks bf16");
  CHECK(f32_blocks == 200);
  CHECK(bf16_blocks == 400);
}

TEST_CASE("--kv-cache-dtype fp8 on the CPU and unknown values are refused at construction, naming the value") {
  for (const auto& [value, needle] :
       {std::pair{"fp8", "--kv-cache-dtype fp8: the cpu backend has no fp8 KV cache"},
        std::pair{"fp8_e4m3", "--kv-cache-dtype fp8: the cpu backend has no fp8 KV cache"},
        std::pair{"fp8_e5m2", "--kv-cache-dtype: 'fp8_e5m2' is not implemented"},
        std::pair{"int4", "--kv-cache-dtype: 'int4' is not one of"}}) {
    engine_config cfg = stories_config(1, 1);
    cfg.device = "cpu";
    cfg.kv_cache_dtype = value;
    INFO(std::string{value});
    try {
      LLM llm{cfg};
      FAIL("the engine started");
    } catch (const error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK(std::string{e.what()}.find(needle) != std::string::npos);
      MESSAGE(std::string{e.what()});
    }
  }
}

TEST_CASE("stories260K greedy with tp 8 (kv heads replicated, n_ff split unevenly) gives the golden ids") {
  // 8 attention heads, 4 kv heads: each kv head serves two ranks; intermediate_size 172 does not divide by 8.
  std::vector<std::vector<int32_t>> expected;
  for (const auto& g : golden())
    expected.push_back(g.output);
  CHECK(run_golden(stories_config(8, 1)) == expected);
}

TEST_CASE(
    "stories260K greedy with tp 8 and decode context parallel 2 (each kv head's cache split, not copied) gives "
    "the golden ids") {
  std::vector<std::vector<int32_t>> expected;
  for (const auto& g : golden())
    expected.push_back(g.output);
  for (bool caching : {true, false}) {
    INFO("prefix caching " << caching);
    engine_config cfg = stories_config(8, 1, {}, caching);
    cfg.decode_context_parallel_size = 2;
    CHECK(run_golden(cfg) == expected);
  }
}

TEST_CASE("an explicit pp_layer_partition runs uneven stages and reports them") {
  LLM llm{stories_config(1, 3, "1,3,1")};
  CHECK(llm.info().stage_layers == std::vector<int64_t>{1, 3, 1});
  sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 64;
  CHECK(llm.generate(prompt{golden()[1].prompt}, p).outputs.at(0).token_ids == golden()[1].output);
  LLM vllm_split{stories_config(1, 4)};
  // vLLM's default: 5 / 4 = 1 each, the remainder to the stage before the last.
  CHECK(vllm_split.info().stage_layers == std::vector<int64_t>{1, 1, 2, 1});
}

TEST_CASE("layouts the model cannot take fail at once, before any weight is loaded, naming the numbers") {
  auto expect_config_error = [](const engine_config& cfg, const std::string& needle) {
    INFO("expecting: " << needle);
    auto start = std::chrono::steady_clock::now();
    try {
      LLM llm{cfg};
      FAIL("the engine started");
    } catch (const error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK(std::string{e.what()}.find(needle) != std::string::npos);
      MESSAGE(std::string{e.what()});
    }
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  };
  // A directory with config.json but no weights: a layout error must come first, so nothing was read.
  auto no_weights = test::make_temp_dir("actorllm-no-weights");
  std::filesystem::copy_file(test::model_dir("stories260K") / "config.json", no_weights / "config.json");
  auto tp3 = stories_config(3, 1);
  tp3.model = no_weights.string();
  expect_config_error(tp3, "8 attention heads and 4 kv heads are not divisible by tensor_parallel_size 3");
  auto pp6 = stories_config(1, 6);
  pp6.model = no_weights.string();
  expect_config_error(pp6, "pipeline_parallel_size 6 is larger than the model's 5 layers");
  std::filesystem::remove_all(no_weights);

  expect_config_error(stories_config(3, 1),
                      "8 attention heads and 4 kv heads are not divisible by tensor_parallel_size 3");
  expect_config_error(stories_config(16, 1), "8 attention heads are not divisible by tensor_parallel_size 16");
  expect_config_error(stories_config(1, 6), "pipeline_parallel_size 6 is larger than the model's 5 layers");
  expect_config_error(stories_config(1, 2, "3,3"), "sums to 6 layers but the model has 5");
  expect_config_error(stories_config(1, 3, "3,2"), "has 2 stages but pipeline_parallel_size is 3");
  expect_config_error(stories_config(1, 2, "5,0"), "every stage needs at least 1 layer");
  auto tiny_cache = stories_config(1, 1);
  tiny_cache.kv_cache_memory = 100000;  // 4 blocks of 16 tokens: less than max_model_len 512
  expect_config_error(tiny_cache, "larger than the maximum number of tokens that can be stored in the KV cache (64");
}

TEST_CASE("a device this build cannot run is refused at construction, naming the value, before any file is read") {
  for (const auto& [name, needle] :
       {std::pair{"cuda", "--device cuda: no"}, std::pair{"tpu", "--device 'tpu' is not a device"}}) {
    if (std::string{name} == "cuda" && visible_gpu_count() > 0)
      continue;  // a machine with a GPU runs it
    engine_config cfg = stories_config(1, 1);
    cfg.model = "/nonexistent/model";  // the device is refused first
    cfg.device = name;
    INFO(name);
    try {
      LLM llm{cfg};
      FAIL("the engine started");
    } catch (const error& e) {
      CHECK(e.code() == errc::invalid_config);
      CHECK(std::string{e.what()}.find(needle) != std::string::npos);
      MESSAGE(std::string{e.what()});
    }
  }
  engine_config cpu = stories_config(1, 1);
  cpu.device = "cpu";
  LLM llm{cpu};
  sampling_params greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 8;
  CHECK(llm.generate(prompt{std::vector<int32_t>{1}}, greedy).outputs.front().token_ids.size() == 8);
}

TEST_CASE("a missing model directory is a load error naming the path") {
  engine_config cfg = stories_config(1, 1);
  cfg.model = "/nonexistent/model";
  try {
    LLM llm{cfg};
    FAIL("the engine started");
  } catch (const error& e) {
    CHECK(e.code() == errc::load_failed);
    CHECK(std::string{e.what()}.find("/nonexistent/model") != std::string::npos);
  }
}

TEST_CASE("dp 2 in one process: both replicas serve the golden output and the router spreads the requests") {
  engine_config c;
  c.model = test::model_dir("stories260K").string();
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 2;
  c.data_parallel_size = 2;
  LLM llm{c};
  CHECK(llm.info().data_parallel_size == 2);
  const test::golden_case g = test::greedy_from_bos();
  for (int i = 0; i < 4; ++i)
    CHECK(test::greedy_ids(llm, g) == g.output);
  const engine_stats s = llm.stats();
  REQUIRE(s.replicas.size() == 2);
  CHECK(s.replicas[0].routed_requests == 2);  // idle replicas alternate (fewer routed first)
  CHECK(s.replicas[1].routed_requests == 2);
  CHECK(s.healthy);
}
