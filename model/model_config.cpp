// config.json / generation_config.json parsing. Strict about what the forward pass depends on (sizes, activation,
// rope scaling), lenient about everything else HF writes there (dropout, use_cache, ...), which is ignored.
#include "model/model_config.hpp"

#include "model/json_util.hpp"
#include "model/model_error.hpp"
#include "model/text_file.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <array>
#include <limits>
#include <utility>

namespace actorllm::model {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

struct architecture_entry {
  std::string_view architecture;
  std::string_view model_type;
};
constexpr std::array<architecture_entry, 4> known_architectures{{
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
}};

/// Typed access to the fields of one JSON object; every error names the file and the (dotted) field.
class field_reader {
 public:
  field_reader(simdjson::dom::object obj, std::string_view origin, std::string prefix = {})
      : obj_(obj), origin_(origin), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    throw model_error(fmt::format("{}: field '{}{}' {}", origin_, prefix_, key, what));
  }

  /// The field's value; nullopt when absent. `null` counts as absent when `null_is_absent`.
  std::optional<element> find(std::string_view key, bool null_is_absent = true) const {
    element e;
    if (obj_.at_key(key).get(e) != simdjson::SUCCESS)
      return std::nullopt;
    if (null_is_absent && e.is_null())
      return std::nullopt;
    return e;
  }

  element required(std::string_view key) const {
    auto e = find(key, false);
    if (!e)
      fail(key, "is missing");
    return *e;
  }

  int64_t as_int(std::string_view key, element e) const {
    if (e.type() == element_type::INT64)
      return e.get_int64().value_unsafe();
    if (e.type() == element_type::UINT64)
      fail(key, fmt::format("is too large ({})", e.get_uint64().value_unsafe()));
    fail(key, fmt::format("must be an integer, got {}", json::type_name(e)));
  }

  double as_number(std::string_view key, element e) const {
    switch (e.type()) {
      case element_type::INT64:
        return static_cast<double>(e.get_int64().value_unsafe());
      case element_type::UINT64:
        return static_cast<double>(e.get_uint64().value_unsafe());
      case element_type::DOUBLE:
        return e.get_double().value_unsafe();
      default:
        fail(key, fmt::format("must be a number, got {}", json::type_name(e)));
    }
  }

  /// A size: positive and below 2^31, so that products of two sizes (n_head * head_dim) cannot overflow.
  int64_t as_size(std::string_view key, element e) const {
    int64_t v = as_int(key, e);
    if (v <= 0)
      fail(key, fmt::format("must be positive, got {}", v));
    if (v > std::numeric_limits<int32_t>::max())
      fail(key, fmt::format("is implausibly large ({})", v));
    return v;
  }

  int64_t required_positive_int(std::string_view key) const { return as_size(key, required(key)); }

  std::optional<int64_t> optional_positive_int(std::string_view key) const {
    auto e = find(key);
    if (!e)
      return std::nullopt;
    return as_size(key, *e);
  }

  double positive_number(std::string_view key, std::optional<double> default_value) const {
    auto e = find(key);
    if (!e) {
      if (!default_value)
        fail(key, "is missing");
      return *default_value;
    }
    double v = as_number(key, *e);
    if (!(v > 0.0) || v == std::numeric_limits<double>::infinity())
      fail(key, fmt::format("must be a positive finite number, got {}", v));
    return v;
  }

  bool optional_bool(std::string_view key, bool default_value) const {
    auto e = find(key);
    if (!e)
      return default_value;
    if (e->type() != element_type::BOOL)
      fail(key, fmt::format("must be true or false, got {}", json::type_name(*e)));
    return e->get_bool().value_unsafe();
  }

  std::optional<std::string_view> optional_string(std::string_view key) const {
    auto e = find(key);
    if (!e)
      return std::nullopt;
    if (e->type() != element_type::STRING)
      fail(key, fmt::format("must be a string, got {}", json::type_name(*e)));
    return e->get_string().value_unsafe();
  }

  int32_t as_token_id(std::string_view key, element e) const {
    int64_t v = as_int(key, e);
    if (v < 0 || v > std::numeric_limits<int32_t>::max())
      fail(key, fmt::format("must be a token id (0 to 2^31-1), got {}", v));
    return static_cast<int32_t>(v);
  }

  /// An int or a list of ints (eos_token_id); nullopt when absent or null.
  std::optional<std::vector<int32_t>> optional_token_ids(std::string_view key) const {
    auto e = find(key);
    if (!e)
      return std::nullopt;
    std::vector<int32_t> ids;
    if (e->type() == element_type::ARRAY) {
      for (element item : json::as_array(*e))
        ids.push_back(as_token_id(key, item));
    } else if (e->type() == element_type::INT64 || e->type() == element_type::UINT64) {
      ids.push_back(as_token_id(key, *e));
    } else {
      fail(key, fmt::format("must be a token id or a list of token ids, got {}", json::type_name(*e)));
    }
    return ids;
  }

 private:
  simdjson::dom::object obj_;
  std::string_view origin_;
  std::string prefix_;
};

simdjson::dom::object parse_object(simdjson::dom::parser& parser, std::string_view text, std::string_view origin) {
  element root;
  if (auto err = parser.parse(text.data(), text.size()).get(root); err != simdjson::SUCCESS)
    throw model_error(fmt::format("{}: not valid JSON: {}", origin, simdjson::error_message(err)));
  if (root.type() != element_type::OBJECT)
    throw model_error(fmt::format("{}: must be a JSON object, got {}", origin, json::type_name(root)));
  return json::as_object(root);
}

rope_scaling parse_rope_scaling(const field_reader& fields, std::string_view origin) {
  rope_scaling rope;
  auto e = fields.find("rope_scaling");
  if (!e)
    return rope;
  if (e->type() != element_type::OBJECT)
    fields.fail("rope_scaling", fmt::format("must be an object or null, got {}", json::type_name(*e)));
  field_reader scaling(json::as_object(*e), origin, "rope_scaling.");
  // transformers renamed "type" to "rope_type"; checkpoints carry either.
  std::optional<std::string_view> type = scaling.optional_string("rope_type");
  if (!type)
    type = scaling.optional_string("type");
  if (!type)
    fields.fail("rope_scaling", "has neither 'rope_type' nor 'type'");
  if (*type == "default")  // transformers' spelling of "no scaling"
    return rope;
  if (*type == "linear") {
    rope.type = rope_scaling::kind::linear;
    rope.factor = scaling.positive_number("factor", std::nullopt);
    return rope;
  }
  if (*type == "llama3") {
    rope.type = rope_scaling::kind::llama3;
    rope.factor = scaling.positive_number("factor", std::nullopt);
    rope.low_freq_factor = scaling.positive_number("low_freq_factor", std::nullopt);
    rope.high_freq_factor = scaling.positive_number("high_freq_factor", std::nullopt);
    auto original = scaling.optional_positive_int("original_max_position_embeddings");
    if (!original)
      scaling.fail("original_max_position_embeddings", "is missing");
    rope.original_max_position_embeddings = *original;
    // llama3 interpolates between the two wavelengths; equal factors would divide by zero.
    if (!(rope.high_freq_factor > rope.low_freq_factor))
      scaling.fail("high_freq_factor", fmt::format("must be greater than low_freq_factor ({} <= {})",
                                                   rope.high_freq_factor, rope.low_freq_factor));
    return rope;
  }
  fields.fail("rope_scaling",
              fmt::format("has type '{}', which actorllm does not support (supported: linear, llama3)", *type));
}

}  // namespace

rope_config model_config::rope_cfg() const { return rope_config{head_dim, rope_theta, rope}; }

model_config parse_model_config(std::string_view config_json, std::string_view origin) {
  simdjson::dom::parser parser;
  field_reader fields(parse_object(parser, config_json, origin), origin);
  model_config cfg;

  auto arch = fields.required("architectures");
  if (arch.type() != element_type::ARRAY)
    fields.fail("architectures", fmt::format("must be a list of strings, got {}", json::type_name(arch)));
  auto arch_list = json::as_array(arch);
  if (arch_list.size() == 0)
    fields.fail("architectures", "is empty");
  element first = arch_list.at(0).value_unsafe();
  if (first.type() != element_type::STRING)
    fields.fail("architectures", fmt::format("must be a list of strings, got {} in it", json::type_name(first)));
  cfg.architecture = std::string(first.get_string().value_unsafe());
  const architecture_entry* known = nullptr;
  for (const auto& entry : known_architectures)
    if (entry.architecture == cfg.architecture)
      known = &entry;
  if (known == nullptr)
    fields.fail("architectures",
                fmt::format("names '{}', which actorllm does not support (supported: LlamaForCausalLM, "
                            "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)",
                            cfg.architecture));
  cfg.model_type = std::string(fields.optional_string("model_type").value_or(known->model_type));

  cfg.n_embd = fields.required_positive_int("hidden_size");
  cfg.n_ff = fields.required_positive_int("intermediate_size");
  cfg.n_layer = fields.required_positive_int("num_hidden_layers");
  cfg.n_head = fields.required_positive_int("num_attention_heads");
  cfg.n_head_kv = fields.optional_positive_int("num_key_value_heads").value_or(cfg.n_head);
  cfg.n_vocab = fields.required_positive_int("vocab_size");
  cfg.max_position_embeddings = fields.required_positive_int("max_position_embeddings");
  if (cfg.n_head % cfg.n_head_kv != 0)
    fields.fail("num_key_value_heads",
                fmt::format("({}) must divide num_attention_heads ({})", cfg.n_head_kv, cfg.n_head));
  if (auto head_dim = fields.optional_positive_int("head_dim")) {
    cfg.head_dim = *head_dim;
  } else {
    if (cfg.n_embd % cfg.n_head != 0)
      fields.fail("hidden_size", fmt::format("({}) is not divisible by num_attention_heads ({}) and there is no "
                                             "head_dim",
                                             cfg.n_embd, cfg.n_head));
    cfg.head_dim = cfg.n_embd / cfg.n_head;
  }
  // rotate_half pairs element i with i + head_dim/2.
  if (cfg.head_dim % 2 != 0)
    fields.fail("head_dim", fmt::format("must be even for rotary embeddings, got {}", cfg.head_dim));

  if (auto act = fields.optional_string("hidden_act"); act && *act != "silu")
    fields.fail("hidden_act", fmt::format("is '{}', but the Llama family is implemented with silu only", *act));
  if (fields.optional_bool("mlp_bias", false))
    fields.fail("mlp_bias", "is true, which actorllm does not support");

  cfg.rope_theta = fields.positive_number("rope_theta", 10000.0);
  cfg.rope = parse_rope_scaling(fields, origin);
  cfg.rms_norm_eps = static_cast<float>(fields.positive_number("rms_norm_eps", 1e-6));
  cfg.tie_word_embeddings = fields.optional_bool("tie_word_embeddings", false);

  // Qwen2's attention always has q/k/v biases (and none on o_proj); its config carries no attention_bias key.
  if (cfg.model_type == "qwen2") {
    cfg.attention_bias = true;
    cfg.o_proj_bias = false;
  } else {
    cfg.attention_bias = fields.optional_bool("attention_bias", false);
    cfg.o_proj_bias = cfg.attention_bias;
  }
  cfg.qk_norm = cfg.model_type == "qwen3";

  std::string_view dtype_key = fields.find("torch_dtype") ? "torch_dtype" : "dtype";
  if (auto name = fields.optional_string(dtype_key)) {
    auto t = parse_dtype(*name);
    if (!t)
      fields.fail(dtype_key,
                  fmt::format("is '{}', which actorllm does not support (float32, float16, bfloat16)", *name));
    cfg.torch_dtype = *t;
  }

  if (auto bos = fields.find("bos_token_id"))
    cfg.bos_token_id = fields.as_token_id("bos_token_id", *bos);
  if (auto eos = fields.optional_token_ids("eos_token_id"))
    cfg.eos_token_ids = std::move(*eos);

  // Qwen2/Qwen3 configs name a window but switch it off with use_sliding_window: false.
  if (fields.optional_bool("use_sliding_window", true))
    cfg.sliding_window = fields.optional_positive_int("sliding_window");
  return cfg;
}

void apply_generation_config(model_config& cfg, std::string_view generation_config_json, std::string_view origin) {
  simdjson::dom::parser parser;
  field_reader fields(parse_object(parser, generation_config_json, origin), origin);
  if (auto eos = fields.optional_token_ids("eos_token_id"))
    cfg.eos_token_ids = std::move(*eos);
}

model_config load_model_config(const std::filesystem::path& dir) {
  auto config_path = dir / "config.json";
  model_config cfg = parse_model_config(read_text_file(config_path), config_path.string());
  auto generation_path = dir / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(generation_path, ec))
    apply_generation_config(cfg, read_text_file(generation_path), generation_path.string());
  return cfg;
}

}  // namespace actorllm::model
