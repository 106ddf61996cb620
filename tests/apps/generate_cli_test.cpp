// `actorllm generate` end to end, as a user runs it.
#include "support/test_paths.hpp"

#include "kernels/device.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <fstream>

using namespace actorllm;

namespace {

std::string generate(const std::string& args) {
  auto cmd = test::actorllm_binary().string() + " generate --model " + test::model_dir("stories260K").string() + " " +
             args + " 2>/dev/null";
  auto r = test::run_command(cmd);
  REQUIRE_MESSAGE(r.status == 0, "command failed: " << cmd);
  return r.out;
}

std::vector<int64_t> ids_of(simdjson::dom::element e) {
  std::vector<int64_t> out;
  for (auto v : e.get_array())
    out.push_back(int64_t(v));
  return out;
}

}  // namespace

TEST_CASE("generate --prompt-ids 1 --max-tokens 256 --temperature 0 gives the golden output ids") {
  simdjson::dom::parser golden_parser;
  auto golden = golden_parser.load((test::model_dir("stories260K") / "reference" / "expected_outputs.json").string());
  auto expected = ids_of(golden["greedy_from_bos"]["output_ids"]);

  auto out = generate("--prompt-ids 1 --max-tokens 256 --temperature 0 --output json");
  simdjson::dom::parser parser;
  auto doc = parser.parse(out);
  CHECK(ids_of(doc["prompt_ids"]) == std::vector<int64_t>{1});
  CHECK(ids_of(doc["output_ids"]) == expected);
  CHECK(std::string{std::string_view(doc["finish_reason"])} == "length");
  CHECK(std::string{std::string_view(doc["text"])} ==
        std::string{std::string_view(golden["greedy_from_bos"]["output_text"])});
}

TEST_CASE("generate --device cpu gives the same greedy ids as the default") {
  simdjson::dom::parser parser_default, parser_cpu;
  auto by_default = parser_default.parse(generate("--prompt-ids 1 --max-tokens 32 --temperature 0 --output json"));
  auto on_cpu = parser_cpu.parse(generate("--prompt-ids 1 --max-tokens 32 --temperature 0 --output json --device cpu"));
  CHECK(ids_of(on_cpu["output_ids"]).size() == 32);
  CHECK(ids_of(on_cpu["output_ids"]) == ids_of(by_default["output_ids"]));
}

TEST_CASE("generate --enforce-eager gives the same greedy ids as the default (where a GPU would replay graphs)") {
  simdjson::dom::parser parser_default, parser_eager;
  auto by_default = parser_default.parse(generate("--prompt-ids 1 --max-tokens 32 --temperature 0 --output json"));
  auto eager =
      parser_eager.parse(generate("--prompt-ids 1 --max-tokens 32 --temperature 0 --output json --enforce-eager"));
  CHECK(ids_of(eager["output_ids"]).size() == 32);
  CHECK(ids_of(eager["output_ids"]) == ids_of(by_default["output_ids"]));
}

TEST_CASE("generate --prompt text continues like llama2.c's reference") {
  auto out = generate("--prompt \"Once upon a time\" --temperature 0 --max-tokens 40");
  CHECK(out.rfind(", there was a little girl named Lily.", 0) == 0);
}

TEST_CASE("generate stops at an eos id of generation_config.json unless --ignore-eos") {
  // Sampling at a high temperature for long enough ends a story (the model emits BOS, id 1, which
  // generation_config.json lists as eos) well before 400 tokens for some seed; --ignore-eos never stops early.
  bool saw_stop = false;
  for (int seed = 0; seed < 8 && !saw_stop; ++seed) {
    simdjson::dom::parser parser;
    auto out =
        generate("--prompt-ids 1 --max-tokens 400 --temperature 1.0 --output json --seed " + std::to_string(seed));
    auto doc = parser.parse(out);
    auto ids = ids_of(doc["output_ids"]);
    if (std::string_view(doc["finish_reason"]) == "stop") {
      saw_stop = true;
      CHECK((ids.back() == 1 || ids.back() == 2));
      CHECK(ids.size() < 400);
      auto again = generate("--prompt-ids 1 --max-tokens 400 --temperature 1.0 --output json --ignore-eos --seed " +
                            std::to_string(seed));
      simdjson::dom::parser p2;
      auto doc2 = p2.parse(again);
      CHECK(ids_of(doc2["output_ids"]).size() == 400);
      CHECK(std::string_view(doc2["finish_reason"]) == "length");
    }
  }
  CHECK(saw_stop);
}

TEST_CASE("generate is reproducible for a seed and varies across seeds") {
  auto a = generate("--prompt-ids 1 --max-tokens 30 --temperature 0.9 --top-p 0.9 --top-k 40 --seed 7 --output json");
  auto b = generate("--prompt-ids 1 --max-tokens 30 --temperature 0.9 --top-p 0.9 --top-k 40 --seed 7 --output json");
  auto c = generate("--prompt-ids 1 --max-tokens 30 --temperature 0.9 --top-p 0.9 --top-k 40 --seed 8 --output json");
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("generate rejects bad input with a message naming the flag") {
  auto bin = test::actorllm_binary().string();
  auto model = test::model_dir("stories260K").string();
  struct bad_case {
    std::string args;
    std::string expect;
  };
  std::vector<bad_case> cases{
      {"--prompt-ids 1,x", "--prompt-ids"},
      {"--prompt-ids 1 --max-tokens 0", "--max-tokens"},
      {"--prompt-ids 1 --max-tokens 600", "maximum model length of 512"},
      {"--prompt-ids 9999", "outside the vocabulary"},
      {"--prompt-ids 1 --temperature -1", "--temperature"},
      {"--prompt-ids 1 --top-p 0", "--top-p"},
      {"--prompt-ids 1 --load-format nope", "--load-format"},
      {"--prompt-ids 1 --output xml", "--output"},
  };
  if (visible_gpu_count() == 0)  // no CUDA backend in the build, or no GPU for it: refused either way
    cases.push_back({"--prompt-ids 1 --device cuda", "--device cuda: no"});
  for (const auto& c : cases) {
    auto r = test::run_command(bin + " generate --model " + model + " " + c.args + " 2>&1");
    INFO(c.args << " -> " << r.out);
    CHECK(r.status != 0);
    CHECK(r.out.find(c.expect) != std::string::npos);
  }
  auto r = test::run_command(bin + " generate --model /nonexistent --prompt-ids 1 2>&1");
  CHECK(r.status != 0);
  CHECK(r.out.find("/nonexistent") != std::string::npos);
}

TEST_CASE("generate --prompt without a tokenizer is refused before the weights load") {
  // Weights that would fail to load: the tokenizer's absence must be what the user hears about, at once.
  auto dir = test::make_temp_dir("actorllm-no-tokenizer");
  std::filesystem::copy_file(test::model_dir("stories260K") / "config.json", dir / "config.json");
  std::ofstream{dir / "model.safetensors"} << "not a safetensors file";
  auto r = test::run_command(test::actorllm_binary().string() + " generate --model " + dir.string() +
                             " --prompt Hello 2>&1");
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(r.out.find("--prompt needs a tokenizer") != std::string::npos);
  CHECK(r.out.find("--prompt-ids") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("generate runs a dummy-weight model from config.json alone") {
  auto dir = test::make_temp_dir("actorllm-dummy");
  std::ofstream{dir / "config.json"} << R"({"architectures":["LlamaForCausalLM"],"model_type":"llama",
    "hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
    "vocab_size":300,"max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":10000.0,"hidden_act":"silu",
    "tie_word_embeddings":false,"torch_dtype":"bfloat16","eos_token_id":2})";
  auto r = test::run_command(test::actorllm_binary().string() + " generate --model " + dir.string() +
                             " --load-format dummy --prompt-ids 5,6,7 --max-tokens 8 --temperature 0 --ignore-eos "
                             "--output json 2>&1");
  REQUIRE(r.status == 0);
  simdjson::dom::parser parser;
  auto doc = parser.parse(r.out);
  CHECK(ids_of(doc["output_ids"]).size() == 8);
  std::filesystem::remove_all(dir);
}

TEST_CASE("generate -tp/-pp/--pp-layer-partition run the sharded engine and give the golden ids") {
  simdjson::dom::parser golden_parser;
  auto golden = golden_parser.load((test::model_dir("stories260K") / "reference" / "expected_outputs.json").string());
  auto expected = ids_of(golden["greedy_from_bos"]["output_ids"]);
  expected.resize(64);
  for (std::string layout : {"-tp 2 -pp 2", "--tensor-parallel-size 4", "-pp 2 --pp-layer-partition 1,4", "-pp=3"}) {
    INFO(layout);
    auto out = generate("--prompt-ids 1 --max-tokens 64 --temperature 0 --output json " + layout);
    simdjson::dom::parser parser;
    auto doc = parser.parse(out);
    CHECK(ids_of(doc["output_ids"]) == expected);
  }
  auto r = test::run_command(test::actorllm_binary().string() + " generate --model " +
                             test::model_dir("stories260K").string() + " --prompt-ids 1 -tp 3 2>&1");
  CHECK(r.status != 0);
  CHECK(r.out.find("8 attention heads and 4 kv heads are not divisible by tensor_parallel_size 3") !=
        std::string::npos);
}

TEST_CASE(
    "generate -tp 8 -dcp 2 (and vLLM's interleave flag) and -pcp give the golden ids, -dcp 4 is refused naming 1, 2") {
  simdjson::dom::parser golden_parser;
  auto golden = golden_parser.load((test::model_dir("stories260K") / "reference" / "expected_outputs.json").string());
  auto expected = ids_of(golden["greedy_from_bos"]["output_ids"]);
  expected.resize(64);
  for (std::string layout : {"-tp 8 -dcp 2", "-tp 8 --decode-context-parallel-size=2 --cp-kv-cache-interleave-size 4",
                             "-tp 8 -dcp=2 --dcp-kv-cache-interleave-size 2", "-pcp 2", "-tp 2 -pcp 2 -pp 2",
                             "--prefill-context-parallel-size 3"}) {
    INFO(layout);
    auto out = generate("--prompt-ids 1 --max-tokens 64 --temperature 0 --output json " + layout);
    simdjson::dom::parser parser;
    auto doc = parser.parse(out);
    CHECK(ids_of(doc["output_ids"]) == expected);
  }
  auto r = test::run_command(test::actorllm_binary().string() + " generate --model " +
                             test::model_dir("stories260K").string() + " --prompt-ids 1 -tp 8 -dcp 4 2>&1");
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.out.find("decode_context_parallel_size 4 cannot split the KV cache of 4 kv heads at "
                           "tensor_parallel_size 8") != std::string::npos,
                r.out);
  CHECK(r.out.find("valid sizes: 1, 2") != std::string::npos);
}
