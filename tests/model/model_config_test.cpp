// config.json / generation_config.json parsing: the real model, real configs of each supported family, and bad
// configs that must be refused with a message naming the file and the field.
#include "model/model_config.hpp"

#include "model_test_util.hpp"
#include "test_paths.hpp"

#include <doctest/doctest.h>

#include <map>

using namespace actorllm;
using namespace actorllm::model;
using test_util::error_of;
using test_util::mentions;

namespace {

/// Writes config.json (and generation_config.json when given) into a fresh directory and loads it.
model_config load_written(const std::string& config, const std::string& generation = {}) {
  auto dir = test_util::temp_dir("actorllm-config");
  test_util::write_file(dir / "config.json", config);
  if (!generation.empty())
    test_util::write_file(dir / "generation_config.json", generation);
  return load_model_config(dir);
}

/// A minimal valid Llama config as key -> raw JSON value, for tests that break one field at a time.
std::map<std::string, std::string> base_fields() {
  return {{"architectures", R"(["LlamaForCausalLM"])"},
          {"model_type", R"("llama")"},
          {"hidden_size", "64"},
          {"intermediate_size", "172"},
          {"num_hidden_layers", "2"},
          {"num_attention_heads", "8"},
          {"num_key_value_heads", "4"},
          {"vocab_size", "512"},
          {"max_position_embeddings", "512"},
          {"hidden_act", R"("silu")"},
          {"rms_norm_eps", "1e-5"},
          {"torch_dtype", R"("float32")"}};
}

std::string to_json(const std::map<std::string, std::string>& fields) {
  std::string out = "{";
  for (const auto& [k, v] : fields) {
    if (out.size() > 1)
      out += ',';
    out += fmt::format("\"{}\":{}", k, v);
  }
  return out + "}";
}

/// The error parse_model_config gives for the base config with `key` set to `value` (or removed when value is "").
std::string error_with(const std::string& key, const std::string& value) {
  auto fields = base_fields();
  if (value.empty())
    fields.erase(key);
  else
    fields[key] = value;
  const std::string json = to_json(fields);
  return error_of([&] { parse_model_config(json, "/models/x/config.json"); });
}

}  // namespace

TEST_CASE("config: stories260K loads with eos ids from generation_config.json") {
  model_config cfg = load_model_config(actorllm::test::model_dir("stories260K"));
  CHECK(cfg.architecture == "LlamaForCausalLM");
  CHECK(cfg.model_type == "llama");
  CHECK(cfg.n_embd == 64);
  CHECK(cfg.n_ff == 172);
  CHECK(cfg.n_layer == 5);
  CHECK(cfg.n_head == 8);
  CHECK(cfg.n_head_kv == 4);
  CHECK(cfg.head_dim == 8);
  CHECK(cfg.n_vocab == 512);
  CHECK(cfg.max_position_embeddings == 512);
  CHECK(cfg.rope_theta == 10000.0);
  CHECK(cfg.rope.type == rope_scaling::kind::none);
  CHECK(cfg.rms_norm_eps == doctest::Approx(1e-5));
  CHECK(cfg.tie_word_embeddings);
  CHECK_FALSE(cfg.attention_bias);
  CHECK_FALSE(cfg.o_proj_bias);
  CHECK_FALSE(cfg.qk_norm);
  CHECK(cfg.torch_dtype == dtype::f32);
  CHECK(cfg.bos_token_id == 1);
  CHECK(cfg.eos_token_ids == std::vector<int32_t>{2, 1});  // config.json alone says 2
  CHECK_FALSE(cfg.sliding_window.has_value());
  rope_config rc = cfg.rope_cfg();
  CHECK(rc.head_dim == 8);
  CHECK(rc.theta == 10000.0);
  CHECK(rc.scaling.type == rope_scaling::kind::none);

  // Without generation_config.json, config.json's eos_token_id stands.
  auto text = std::string{};
  {
    std::ifstream in(actorllm::test::model_dir("stories260K") / "config.json");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  CHECK(parse_model_config(text, "config.json").eos_token_ids == std::vector<int32_t>{2});
}

TEST_CASE("config: Llama 3.1 with llama3 rope scaling") {
  const std::string config = R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";
  const std::string generation = R"({"bos_token_id": 128000, "do_sample": true,
    "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9})";
  model_config cfg = load_written(config, generation);
  CHECK(cfg.n_embd == 4096);
  CHECK(cfg.n_ff == 14336);
  CHECK(cfg.n_head_kv == 8);
  CHECK(cfg.head_dim == 128);
  CHECK(cfg.n_vocab == 128256);
  CHECK(cfg.max_position_embeddings == 131072);
  CHECK(cfg.rope_theta == 500000.0);
  CHECK(cfg.rope.type == rope_scaling::kind::llama3);
  CHECK(cfg.rope.factor == 8.0);
  CHECK(cfg.rope.low_freq_factor == 1.0);
  CHECK(cfg.rope.high_freq_factor == 4.0);
  CHECK(cfg.rope.original_max_position_embeddings == 8192);
  CHECK(cfg.torch_dtype == dtype::bf16);
  CHECK_FALSE(cfg.tie_word_embeddings);
  CHECK(cfg.bos_token_id == 128000);
  CHECK(cfg.eos_token_ids == std::vector<int32_t>{128001, 128008, 128009});
  CHECK(cfg.rope_cfg().scaling.type == rope_scaling::kind::llama3);
}

TEST_CASE("config: linear rope scaling under the old 'type' key, and 'default' meaning none") {
  auto fields = base_fields();
  fields["rope_scaling"] = R"({"type": "linear", "factor": 2.0})";
  model_config cfg = parse_model_config(to_json(fields), "config.json");
  CHECK(cfg.rope.type == rope_scaling::kind::linear);
  CHECK(cfg.rope.factor == 2.0);
  fields["rope_scaling"] = R"({"rope_type": "default"})";
  CHECK(parse_model_config(to_json(fields), "config.json").rope.type == rope_scaling::kind::none);
}

TEST_CASE("config: Qwen2 has q/k/v biases without the key and no sliding window when it is switched off") {
  const std::string config = R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";
  model_config cfg = load_written(config, R"({"eos_token_id": [151645, 151643], "top_k": 20})");
  CHECK(cfg.model_type == "qwen2");
  CHECK(cfg.attention_bias);
  CHECK_FALSE(cfg.o_proj_bias);
  CHECK_FALSE(cfg.qk_norm);
  CHECK(cfg.head_dim == 64);
  CHECK(cfg.n_head_kv == 2);
  CHECK(cfg.tie_word_embeddings);
  CHECK(cfg.rms_norm_eps == doctest::Approx(1e-6));
  CHECK(cfg.rope_theta == 1e6);
  CHECK_FALSE(cfg.sliding_window.has_value());
  CHECK(cfg.eos_token_ids == std::vector<int32_t>{151645, 151643});
}

TEST_CASE("config: Qwen3 has qk_norm and an explicit head_dim") {
  const std::string config = R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
    "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})";
  model_config cfg = load_written(config);
  CHECK(cfg.model_type == "qwen3");
  CHECK(cfg.qk_norm);
  CHECK_FALSE(cfg.attention_bias);
  CHECK(cfg.head_dim == 128);  // not hidden_size / heads (64)
  CHECK(cfg.n_head * cfg.head_dim == 2048);
  CHECK(cfg.rope_theta == 1e6);  // an integer in the file
  CHECK(cfg.rope.type == rope_scaling::kind::none);
  CHECK(cfg.eos_token_ids == std::vector<int32_t>{151645});
  CHECK_FALSE(cfg.sliding_window.has_value());
}

TEST_CASE("config: Mistral has a sliding window and the newer dtype key is read") {
  const std::string config = R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
    "dtype": "float16", "transformers_version": "4.34.0.dev0", "use_cache": true, "vocab_size": 32000})";
  model_config cfg = load_written(config);
  CHECK(cfg.architecture == "MistralForCausalLM");
  CHECK(cfg.sliding_window == 4096);
  CHECK(cfg.torch_dtype == dtype::f16);
  CHECK(cfg.head_dim == 128);
  CHECK(cfg.eos_token_ids == std::vector<int32_t>{2});
}

TEST_CASE("config: defaults for optional fields and model_type derived from the architecture") {
  auto fields = base_fields();
  fields.erase("model_type");
  fields.erase("num_key_value_heads");
  fields.erase("torch_dtype");
  fields.erase("rms_norm_eps");
  fields.erase("hidden_act");
  fields["head_dim"] = "null";
  model_config cfg = parse_model_config(to_json(fields), "config.json");
  CHECK(cfg.model_type == "llama");
  CHECK(cfg.n_head_kv == 8);
  CHECK(cfg.head_dim == 8);
  CHECK(cfg.torch_dtype == dtype::f32);
  CHECK(cfg.rms_norm_eps == doctest::Approx(1e-6));
  CHECK(cfg.rope_theta == 10000.0);
  CHECK_FALSE(cfg.bos_token_id.has_value());
  CHECK(cfg.eos_token_ids.empty());

  fields["attention_bias"] = "true";  // Llama puts it on o_proj too
  cfg = parse_model_config(to_json(fields), "config.json");
  CHECK(cfg.attention_bias);
  CHECK(cfg.o_proj_bias);
}

TEST_CASE("config: bad configs are refused naming the file and the field") {
  CHECK(mentions(error_with("hidden_size", ""), {"/models/x/config.json", "'hidden_size'", "missing"}));
  CHECK(mentions(error_with("hidden_size", R"("64")"), {"config.json", "'hidden_size'", "integer", "string"}));
  CHECK(mentions(error_with("hidden_size", "64.5"), {"'hidden_size'", "integer"}));
  CHECK(mentions(error_with("hidden_size", "null"), {"'hidden_size'", "null"}));
  CHECK(mentions(error_with("vocab_size", "0"), {"'vocab_size'", "positive"}));
  CHECK(mentions(error_with("num_hidden_layers", "-2"), {"'num_hidden_layers'", "positive"}));
  CHECK(mentions(error_with("num_attention_heads", "99999999999999999999"), {"config.json"}));
  CHECK(mentions(error_with("hidden_size", "4294967296"), {"'hidden_size'", "implausibly large"}));
  CHECK(mentions(error_with("num_key_value_heads", "3"), {"'num_key_value_heads'", "3", "8"}));
  CHECK(mentions(error_with("hidden_size", "60"), {"'hidden_size'", "60", "8"}));  // no head_dim to fall back on
  CHECK(mentions(error_with("head_dim", "7"), {"'head_dim'", "even"}));
  CHECK(mentions(error_with("architectures", R"(["GemmaForCausalLM"])"), {"'architectures'", "GemmaForCausalLM"}));
  CHECK(mentions(error_with("architectures", R"([])"), {"'architectures'", "empty"}));
  CHECK(mentions(error_with("architectures", R"("LlamaForCausalLM")"), {"'architectures'", "list"}));
  CHECK(mentions(error_with("hidden_act", R"("gelu")"), {"'hidden_act'", "gelu"}));
  CHECK(mentions(error_with("mlp_bias", "true"), {"'mlp_bias'"}));
  CHECK(mentions(error_with("rope_scaling", R"({"type": "yarn", "factor": 4.0})"), {"'rope_scaling'", "yarn"}));
  CHECK(mentions(error_with("rope_scaling", R"({"rope_type": "dynamic", "factor": 4.0})"), {"dynamic"}));
  CHECK(mentions(error_with("rope_scaling", R"({"factor": 4.0})"), {"'rope_scaling'", "rope_type"}));
  CHECK(mentions(error_with("rope_scaling", R"("llama3")"), {"'rope_scaling'", "object"}));
  CHECK(mentions(error_with("rope_scaling", R"({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
                                               "original_max_position_embeddings": 8192})"),
                 {"'rope_scaling.low_freq_factor'", "missing"}));
  CHECK(mentions(error_with("rope_scaling", R"({"rope_type": "linear", "factor": "2"})"),
                 {"'rope_scaling.factor'", "number"}));
  CHECK(mentions(error_with("rope_scaling", R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
                 {"'rope_scaling.high_freq_factor'"}));
  CHECK(mentions(error_with("rope_theta", "-1.0"), {"'rope_theta'", "positive"}));
  CHECK(mentions(error_with("rms_norm_eps", "true"), {"'rms_norm_eps'", "number"}));
  CHECK(mentions(error_with("torch_dtype", R"("float8_e4m3fn")"), {"'torch_dtype'", "float8_e4m3fn"}));
  CHECK(mentions(error_with("tie_word_embeddings", "1"), {"'tie_word_embeddings'", "true or false"}));
  CHECK(mentions(error_with("eos_token_id", R"("</s>")"), {"'eos_token_id'"}));
  CHECK(mentions(error_with("eos_token_id", "[2, -1]"), {"'eos_token_id'", "-1"}));
  CHECK(mentions(error_with("bos_token_id", "4294967296"), {"'bos_token_id'"}));
  CHECK(mentions(error_with("sliding_window", "0"), {"'sliding_window'", "positive"}));
  CHECK(mentions(error_with("max_position_embeddings", ""), {"'max_position_embeddings'", "missing"}));

  CHECK(mentions(error_of([] { parse_model_config(R"({"hidden_size": 64,)", "cfg/config.json"); }),
                 {"cfg/config.json", "not valid JSON"}));
  CHECK(mentions(error_of([] { parse_model_config("[1, 2]", "cfg/config.json"); }), {"cfg/config.json", "object"}));
  CHECK(mentions(error_of([] { parse_model_config("", "cfg/config.json"); }), {"cfg/config.json"}));
}

TEST_CASE("config: missing files and a bad generation_config.json name the file") {
  auto empty = test_util::temp_dir("actorllm-config");
  CHECK(mentions(error_of([&] { load_model_config(empty); }), {(empty / "config.json").string(), "cannot read"}));

  auto dir = test_util::temp_dir("actorllm-config");
  test_util::write_file(dir / "config.json", to_json(base_fields()));
  test_util::write_file(dir / "generation_config.json", R"({"eos_token_id": "two"})");
  CHECK(mentions(error_of([&] { load_model_config(dir); }),
                 {(dir / "generation_config.json").string(), "'eos_token_id'"}));
  test_util::write_file(dir / "generation_config.json", R"({"eos_token_id": null, "temperature": 0.7})");
  CHECK(load_model_config(dir).eos_token_ids.empty());  // null leaves config.json's (none here)
}
