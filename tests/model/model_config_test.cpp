// config.json / generation_config.json parsing: the real model, real configs of each supported family, and bad
// configs that must be refused with a message naming the file and the field.
#include "model/model_config.hpp"

#include "model_test_util.hpp"
#include "support/test_paths.hpp"

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

/// Llama 3.1 8B's config.json as transformers 4.43 wrote it: top-level rope_theta and rope_scaling.
const std::string llama31_config = R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

/// The same Llama 3.1 config as transformers 5 writes it: rope_theta and the scaling inside rope_parameters, `dtype`
/// instead of torch_dtype.
const std::string llama31_config_v5 = R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "tie_word_embeddings": false, "dtype": "bfloat16", "transformers_version": "5.0.0", "use_cache": true,
    "vocab_size": 128256})";

/// `fields` with `changes` applied: a value of "" removes the key.
std::map<std::string, std::string> with(std::map<std::string, std::string> fields,
                                        const std::map<std::string, std::string>& changes) {
  for (const auto& [k, v] : changes) {
    if (v.empty())
      fields.erase(k);
    else
      fields[k] = v;
  }
  return fields;
}

model_config parse(const std::map<std::string, std::string>& fields) {
  return parse_model_config(to_json(fields), "/models/x/config.json");
}

std::string error_of_fields(const std::map<std::string, std::string>& fields) {
  const std::string json = to_json(fields);
  return error_of([&] { parse_model_config(json, "/models/x/config.json"); });
}

/// base_fields() turned into a 4-layer model of `architecture` / `model_type`.
std::map<std::string, std::string> family_fields(const std::string& architecture, const std::string& model_type) {
  return with(base_fields(), {{"architectures", fmt::format(R"(["{}"])", architecture)},
                              {"model_type", fmt::format(R"("{}")", model_type)},
                              {"num_hidden_layers", "4"}});
}

/// A JSON list of n_layer layer kinds: `sliding` marks the "sliding_attention" ones.
std::string layer_types_json(const std::vector<bool>& sliding) {
  std::vector<std::string> kinds;
  for (bool s : sliding)
    kinds.push_back(s ? R"("sliding_attention")" : R"("full_attention")");
  return fmt::format("[{}]", fmt::join(kinds, ", "));
}

/// Every field of model_config equal.
void check_same_config(const model_config& a, const model_config& b) {
  CHECK(a.architecture == b.architecture);
  CHECK(a.model_type == b.model_type);
  CHECK(a.n_embd == b.n_embd);
  CHECK(a.n_ff == b.n_ff);
  CHECK(a.n_layer == b.n_layer);
  CHECK(a.n_head == b.n_head);
  CHECK(a.n_head_kv == b.n_head_kv);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.n_vocab == b.n_vocab);
  CHECK(a.max_position_embeddings == b.max_position_embeddings);
  CHECK(a.rope_theta == b.rope_theta);
  CHECK(a.rope.type == b.rope.type);
  CHECK(a.rope.factor == b.rope.factor);
  CHECK(a.rope.low_freq_factor == b.rope.low_freq_factor);
  CHECK(a.rope.high_freq_factor == b.rope.high_freq_factor);
  CHECK(a.rope.original_max_position_embeddings == b.rope.original_max_position_embeddings);
  CHECK(a.rms_norm_eps == b.rms_norm_eps);
  CHECK(a.tie_word_embeddings == b.tie_word_embeddings);
  CHECK(a.attention_bias == b.attention_bias);
  CHECK(a.o_proj_bias == b.o_proj_bias);
  CHECK(a.qk_norm == b.qk_norm);
  CHECK(a.torch_dtype == b.torch_dtype);
  CHECK(a.bos_token_id == b.bos_token_id);
  CHECK(a.eos_token_ids == b.eos_token_ids);
  CHECK(a.layer_window == b.layer_window);
  CHECK(a.rope_cfg().theta == b.rope_cfg().theta);
  CHECK(a.rope_cfg().head_dim == b.rope_cfg().head_dim);
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
  CHECK(cfg.layer_window == std::vector<int64_t>(5, 0));
  CHECK(cfg.window_for(0) == 0);
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
  const std::string config = llama31_config;
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
  CHECK(cfg.layer_window == std::vector<int64_t>(24, 0));  // max_window_layers 21 < 24, but the window is off
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
  CHECK(cfg.layer_window == std::vector<int64_t>(28, 0));
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
  CHECK(cfg.layer_window == std::vector<int64_t>(32, 4096));
  CHECK(cfg.window_for(31) == 4096);
  CHECK(cfg.window_for(32) == 0);  // out of range: no window
  CHECK(cfg.window_for(-1) == 0);
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

TEST_CASE("config: Mistral's window is on every layer: 4096 when the key is absent, none when null") {
  auto mistral = family_fields("MistralForCausalLM", "mistral");
  CHECK(parse(with(mistral, {{"sliding_window", "1024"}})).layer_window == std::vector<int64_t>(4, 1024));
  CHECK(parse(mistral).layer_window == std::vector<int64_t>(4, 4096));  // MistralConfig's default
  CHECK(parse(with(mistral, {{"sliding_window", "null"}})).layer_window == std::vector<int64_t>(4, 0));
  // MistralConfig has no use_sliding_window: transformers keeps it as an unused attribute.
  CHECK(parse(with(mistral, {{"sliding_window", "8"}, {"use_sliding_window", "false"}})).layer_window ==
        std::vector<int64_t>(4, 8));
  // A layer_types list that says what Mistral does anyway is fine.
  CHECK(parse(with(mistral, {{"sliding_window", "8"}, {"layer_types", layer_types_json({true, true, true, true})}}))
            .window_for(3) == 8);
  CHECK(parse(with(mistral, {{"sliding_window", "null"}, {"layer_types", layer_types_json({0, 0, 0, 0})}}))
            .window_for(0) == 0);
}

TEST_CASE("config: Qwen2/Qwen3 windows need use_sliding_window and apply from max_window_layers on") {
  for (auto [arch, type] : {std::pair{"Qwen2ForCausalLM", "qwen2"}, std::pair{"Qwen3ForCausalLM", "qwen3"}}) {
    CAPTURE(type);
    auto qwen = family_fields(arch, type);
    auto on = with(qwen, {{"use_sliding_window", "true"}, {"sliding_window", "16"}, {"max_window_layers", "2"}});
    CHECK(parse(on).layer_window == std::vector<int64_t>{0, 0, 16, 16});
    CHECK(parse(with(on, {{"max_window_layers", "0"}})).layer_window == std::vector<int64_t>(4, 16));
    CHECK(parse(with(on, {{"max_window_layers", "4"}})).layer_window == std::vector<int64_t>(4, 0));
    // Defaults: max_window_layers 28 (so no window on a 4-layer model, but on layers 28.. of a 30-layer one) and
    // sliding_window 4096.
    CHECK(parse(with(on, {{"max_window_layers", ""}})).layer_window == std::vector<int64_t>(4, 0));
    std::vector<int64_t> deep(30, 0);
    deep[28] = deep[29] = 4096;
    CHECK(parse(with(on, {{"max_window_layers", ""}, {"sliding_window", ""}, {"num_hidden_layers", "30"}}))
              .layer_window == deep);
    // Off unless use_sliding_window is true; a null window is no window.
    CHECK(parse(with(on, {{"use_sliding_window", ""}})).layer_window == std::vector<int64_t>(4, 0));
    CHECK(parse(with(on, {{"use_sliding_window", "false"}})).layer_window == std::vector<int64_t>(4, 0));
    CHECK(parse(with(on, {{"sliding_window", "null"}})).layer_window == std::vector<int64_t>(4, 0));
    // An explicit layer_types list (transformers >= 4.53) decides, whatever max_window_layers says.
    CHECK(parse(with(on, {{"layer_types", layer_types_json({false, true, false, true})}})).layer_window ==
          std::vector<int64_t>{0, 16, 0, 16});
    CHECK(
        parse(with(qwen, {{"layer_types", layer_types_json({0, 0, 0, 0})}, {"sliding_window", "null"}})).layer_window ==
        std::vector<int64_t>(4, 0));
  }
}

TEST_CASE("config: Llama ignores sliding_window, as transformers' Llama does") {
  auto llama = with(base_fields(), {{"sliding_window", "4"},
                                    {"use_sliding_window", "true"},
                                    {"max_window_layers", "0"},
                                    {"layer_types", layer_types_json({true, true})}});
  model_config cfg = parse(llama);
  CHECK(cfg.layer_window == std::vector<int64_t>(2, 0));
  CHECK(cfg.window_for(1) == 0);
}

TEST_CASE("config: bad windows and layer_types are refused naming the field") {
  auto mistral = family_fields("MistralForCausalLM", "mistral");
  CHECK(mentions(error_of_fields(with(mistral, {{"sliding_window", "0"}})), {"'sliding_window'", "positive"}));
  CHECK(mentions(error_of_fields(with(mistral, {{"sliding_window", R"("4096")"}})), {"'sliding_window'", "integer"}));
  CHECK(mentions(error_of_fields(with(mistral, {{"sliding_window", "8"},
                                                {"layer_types", layer_types_json({true, false, true, false})}})),
                 {"'layer_types[1]'", "full_attention", "every layer"}));
  auto qwen =
      with(family_fields("Qwen2ForCausalLM", "qwen2"), {{"use_sliding_window", "true"}, {"sliding_window", "8"}});
  CHECK(mentions(error_of_fields(with(qwen, {{"layer_types", layer_types_json({false, true, false})}})),
                 {"'layer_types'", "3 entries", "num_hidden_layers is 4"}));
  CHECK(mentions(error_of_fields(with(qwen, {{"layer_types", R"(["full_attention", "full_attention",
                                                                  "chunked_attention", "full_attention"])"}})),
                 {"'layer_types[2]'", "chunked_attention"}));
  CHECK(mentions(error_of_fields(with(qwen, {{"layer_types", R"(["full_attention", 1, "x", "y"])"}})),
                 {"'layer_types[1]'", "string"}));
  CHECK(mentions(error_of_fields(with(qwen, {{"layer_types", R"("full_attention")"}})), {"'layer_types'", "list"}));
  CHECK(mentions(error_of_fields(with(qwen, {{"use_sliding_window", "false"},
                                             {"layer_types", layer_types_json({false, false, false, true})}})),
                 {"'layer_types[3]'", "sliding_attention", "no window"}));
  CHECK(mentions(error_of_fields(with(qwen, {{"max_window_layers", "-1"}})), {"'max_window_layers'", "negative"}));
  CHECK(
      mentions(error_of_fields(with(qwen, {{"use_sliding_window", "1"}})), {"'use_sliding_window'", "true or false"}));
}

TEST_CASE("config: a transformers-5 rope_parameters config parses to the same model_config as its old-layout twin") {
  const model_config old_layout = parse_model_config(llama31_config, "config.json");
  const model_config v5 = parse_model_config(llama31_config_v5, "config.json");
  CHECK(v5.rope_theta == 500000.0);
  CHECK(v5.rope.type == rope_scaling::kind::llama3);
  check_same_config(v5, old_layout);

  // Qwen3 0.6B: transformers 5 writes rope_parameters with the default type and the resolved layer_types.
  std::map<std::string, std::string> qwen3_old = {{"architectures", R"(["Qwen3ForCausalLM"])"},
                                                  {"model_type", R"("qwen3")"},
                                                  {"hidden_size", "1024"},
                                                  {"intermediate_size", "3072"},
                                                  {"num_hidden_layers", "4"},
                                                  {"num_attention_heads", "16"},
                                                  {"num_key_value_heads", "8"},
                                                  {"head_dim", "128"},
                                                  {"vocab_size", "151936"},
                                                  {"max_position_embeddings", "40960"},
                                                  {"max_window_layers", "28"},
                                                  {"rms_norm_eps", "1e-06"},
                                                  {"rope_scaling", "null"},
                                                  {"rope_theta", "1000000"},
                                                  {"sliding_window", "null"},
                                                  {"tie_word_embeddings", "true"},
                                                  {"torch_dtype", R"("bfloat16")"},
                                                  {"use_sliding_window", "false"}};
  auto qwen3_v5 = with(qwen3_old, {{"rope_scaling", ""},
                                   {"rope_theta", ""},
                                   {"rope_parameters", R"({"rope_type": "default", "rope_theta": 1000000.0})"},
                                   {"layer_types", layer_types_json({0, 0, 0, 0})}});
  check_same_config(parse(qwen3_v5), parse(qwen3_old));
  CHECK(parse(qwen3_v5).rope_theta == 1e6);

  // Linear scaling under the old 'type' key, inside rope_parameters.
  auto linear =
      parse(with(base_fields(), {{"rope_parameters", R"({"type": "linear", "factor": 2.0, "rope_theta": 5e5})"}}));
  CHECK(linear.rope.type == rope_scaling::kind::linear);
  CHECK(linear.rope.factor == 2.0);
  CHECK(linear.rope_theta == 5e5);
}

TEST_CASE("config: rope_parameters with the old keys beside it, without a type, and keyed by layer type") {
  const std::string llama3_params = R"({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})";
  // Both layouts, agreeing.
  model_config both = parse(with(base_fields(), {{"rope_parameters", llama3_params},
                                                 {"rope_theta", "500000"},
                                                 {"rope_scaling", R"({"rope_type": "llama3", "factor": 8,
      "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192})"}}));
  CHECK(both.rope_theta == 500000.0);
  CHECK(both.rope.type == rope_scaling::kind::llama3);
  // rope_theta only at the top level: transformers fills rope_parameters' from it.
  model_config top_theta =
      parse(with(base_fields(), {{"rope_theta", "250000"}, {"rope_parameters", R"({"rope_type": "default"})"}}));
  CHECK(top_theta.rope_theta == 250000.0);
  CHECK(top_theta.rope.type == rope_scaling::kind::none);
  // Nothing anywhere: transformers' default theta.
  CHECK(parse(with(base_fields(), {{"rope_parameters", R"({"rope_type": "default"})"}})).rope_theta == 10000.0);
  // No type but nothing to scale with: the default rotation.
  model_config no_type = parse(with(base_fields(), {{"rope_parameters", R"({"rope_theta": 1e6})"}}));
  CHECK(no_type.rope_theta == 1e6);
  CHECK(no_type.rope.type == rope_scaling::kind::none);
  CHECK(parse(with(base_fields(), {{"rope_parameters", "null"}, {"rope_theta", "20000"}})).rope_theta == 20000.0);
  // Keyed by layer type, every entry the same: accepted.
  model_config keyed = parse(with(base_fields(), {{"rope_parameters", fmt::format(R"({{"full_attention": {0},
      "sliding_attention": {0}}})",
                                                                                  llama3_params)}}));
  CHECK(keyed.rope_theta == 500000.0);
  CHECK(keyed.rope.type == rope_scaling::kind::llama3);
  CHECK(keyed.rope.factor == 8.0);
  // ... also when one takes its rope_theta from the top level and that agrees.
  model_config keyed_top =
      parse(with(base_fields(), {{"rope_theta", "1e6"},
                                 {"rope_parameters", R"({"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                              "sliding_attention": {"rope_type": "default"}})"}}));
  CHECK(keyed_top.rope_theta == 1e6);
}

TEST_CASE("config: rope_parameters that disagree or that actorllm does not implement are refused by name") {
  const std::string llama3_params = R"({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})";
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", llama3_params}, {"rope_theta", "10000"}})),
                 {"/models/x/config.json", "'rope_parameters.rope_theta'", "500000", "'rope_theta'", "10000"}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", llama3_params},
                                                      {"rope_scaling", R"({"type": "linear", "factor": 8.0})"}})),
                 {"'rope_parameters'", "llama3", "'rope_scaling'", "linear"}));
  CHECK(mentions(
      error_of_fields(with(base_fields(), {{"rope_parameters", R"({"rope_type": "default", "rope_theta": 1e4})"},
                                           {"rope_scaling", R"({"type": "linear", "factor": 2.0})"}})),
      {"'rope_parameters'", "'rope_scaling'"}));
  for (std::string type : {"yarn", "dynamic", "longrope"})
    CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", fmt::format(R"({{"rope_type": "{}",
        "rope_theta": 1e6, "factor": 4.0}})",
                                                                                        type)}})),
                   {"'rope_parameters'", type}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", R"({"rope_theta": 1e6, "factor": 4.0})"}})),
                 {"'rope_parameters'", "rope_type"}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", R"({"rope_type": "linear"})"}})),
                 {"'rope_parameters.factor'", "missing"}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", R"({"rope_type": "default",
                                                                             "rope_theta": -5})"}})),
                 {"'rope_parameters.rope_theta'", "positive"}));
  CHECK(
      mentions(error_of_fields(with(base_fields(), {{"rope_parameters", "500000"}})), {"'rope_parameters'", "object"}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", R"({
      "full_attention": {"rope_type": "default", "rope_theta": 1e6},
      "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})"}})),
                 {"'rope_parameters'", "'rope_parameters.full_attention'", "'rope_parameters.sliding_attention'",
                  "1000000", "10000"}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", R"({
      "full_attention": {"rope_type": "default", "rope_theta": 1e6},
      "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}})"}})),
                 {"'rope_parameters'", "linear"}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", R"({
      "full_attention": {"rope_type": "yarn", "factor": 4.0}, "sliding_attention": {"rope_type": "default"}})"}})),
                 {"'rope_parameters.full_attention'", "yarn"}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", R"({"full_attention": {"rope_type":
      "default"}, "rope_theta": 1e6})"}})),
                 {"'rope_parameters.rope_theta'", "layer type"}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", R"({"full_attention": {"rope_theta": 1e6},
      "sliding_attention": {"rope_theta": 1e6}})"},
                                                      {"rope_theta", "1e4"}})),
                 {"'rope_parameters.full_attention.rope_theta'", "'rope_theta'"}));
}

TEST_CASE("config: settings that change the math and are not implemented are refused naming field and value") {
  auto refused = [](const std::string& key, const std::string& value, std::initializer_list<std::string> parts) {
    CAPTURE(key);
    CAPTURE(value);
    std::vector<std::string> all{fmt::format("'{}'", key)};
    all.insert(all.end(), parts.begin(), parts.end());
    const std::string err = error_of_fields(with(base_fields(), {{key, value}}));
    for (const auto& p : all)
      CHECK(mentions(err, {p}));
  };
  refused("partial_rotary_factor", "0.5", {"0.5"});
  refused("attn_logit_softcapping", "50.0", {"50", "softcapping"});
  refused("final_logit_softcapping", "30", {"30", "softcapping"});
  refused("embedding_multiplier", "12.0", {"12"});
  refused("residual_multiplier", "0.22", {"0.22"});
  refused("logits_scaling", "8", {"8"});
  refused("attention_multiplier", "0.015625", {"0.015625"});
  refused("attention_multiplier", "1.0", {"1"});  // Granite's default: not 1/sqrt(head_dim)
  refused("num_experts", "8", {"8", "mixture-of-experts"});
  refused("num_local_experts", "8", {"8", "LlamaForCausalLM"});
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_parameters", R"({"rope_type": "default",
                                                                             "partial_rotary_factor": 0.25})"}})),
                 {"'rope_parameters.partial_rotary_factor'", "0.25"}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"rope_scaling", R"({"rope_type": "linear", "factor": 2.0,
                                                                          "partial_rotary_factor": 0.5})"}})),
                 {"'rope_scaling.partial_rotary_factor'", "0.5"}));
  CHECK(mentions(error_of_fields(with(base_fields(), {{"embedding_multiplier", R"("12")"}})),
                 {"'embedding_multiplier'", "number"}));

  // Their neutral values, and settings that do not change inference, are accepted.
  model_config cfg = parse(with(base_fields(), {{"partial_rotary_factor", "1.0"},
                                                {"attn_logit_softcapping", "null"},
                                                {"final_logit_softcapping", "null"},
                                                {"embedding_multiplier", "1.0"},
                                                {"residual_multiplier", "1"},
                                                {"logits_scaling", "1.0"},
                                                {"attention_multiplier", "0.35355339059327373"},  // 1/sqrt(8)
                                                {"num_experts", "0"},
                                                {"num_local_experts", "null"},
                                                {"pretraining_tp", "2"},
                                                {"attention_dropout", "0.1"},
                                                {"initializer_range", "0.02"},
                                                {"use_cache", "false"}}));
  CHECK(cfg.n_embd == 64);
  CHECK(cfg.head_dim == 8);
}
