// config.json / generation_config.json parsing. Strict about what the forward pass depends on (sizes, activation,
// rope, attention windows, and settings of neighbouring families that would change the math), lenient about
// everything else HF writes there (dropout, use_cache, ...), which is ignored.
#include "model/model_config.hpp"

#include "model/json_util.hpp"
#include "model/model_error.hpp"
#include "model/text_file.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <array>
#include <cmath>
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
constexpr std::array<architecture_entry, 7> known_architectures{{
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
    {"MixtralForCausalLM", "mixtral"},
    {"Qwen2MoeForCausalLM", "qwen2_moe"},
    {"Qwen3MoeForCausalLM", "qwen3_moe"},
}};

/// Typed access to the fields of one JSON object; every error names the file and the (dotted) field.
class field_reader {
 public:
  field_reader(simdjson::dom::object obj, std::string_view origin, std::string prefix = {})
      : obj_(obj), origin_(origin), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    throw model_error(fmt::format("{}: field '{}{}' {}", origin_, prefix_, key, what));
  }

  /// The dotted name of `key` as error messages spell it ("rope_parameters.rope_theta").
  std::string full_name(std::string_view key) const { return fmt::format("{}{}", prefix_, key); }

  /// A reader of the object `obj` found under `key`, whose errors name its fields "key.field".
  field_reader child(std::string_view key, simdjson::dom::object obj) const {
    return field_reader(obj, origin_, fmt::format("{}{}.", prefix_, key));
  }

  simdjson::dom::object object() const { return obj_; }

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

  /// An integer in [0, 2^31); `default_value` when absent or null.
  int64_t non_negative_int(std::string_view key, int64_t default_value) const {
    auto e = find(key);
    if (!e)
      return default_value;
    int64_t v = as_int(key, *e);
    if (v < 0)
      fail(key, fmt::format("must not be negative, got {}", v));
    if (v > std::numeric_limits<int32_t>::max())
      fail(key, fmt::format("is implausibly large ({})", v));
    return v;
  }

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

/// partial_rotary_factor < 1 rotates only the first part of each head (HF's rope code reads it for every model,
/// Llama included); actorllm rotates whole heads.
void refuse_partial_rotary(const field_reader& fields) {
  if (auto e = fields.find("partial_rotary_factor")) {
    double v = fields.as_number("partial_rotary_factor", *e);
    if (v != 1.0)
      fields.fail("partial_rotary_factor",
                  fmt::format("is {}, but actorllm rotates the whole head (only 1.0 is supported)", v));
  }
}

/// One rope-scaling object: `rope_scaling` (the old layout) or `rope_parameters` / one of its per-layer-type entries
/// (transformers 5, which keeps rope_theta in there too). `reader` reads the object; `parent.fail(key, ...)` names
/// the object itself. A missing type means "default" only in rope_parameters and only when nothing but rope_theta
/// (or partial_rotary_factor) is there: a scaling factor without a type is ambiguous.
rope_scaling parse_scaling_object(const field_reader& parent, std::string_view key, const field_reader& reader,
                                  bool type_may_be_absent) {
  rope_scaling rope;
  refuse_partial_rotary(reader);
  // transformers renamed "type" to "rope_type"; checkpoints carry either.
  std::optional<std::string_view> type = reader.optional_string("rope_type");
  if (!type)
    type = reader.optional_string("type");
  if (!type) {
    bool only_theta = true;
    for (auto [k, v] : reader.object())
      only_theta = only_theta && (k == "rope_theta" || k == "partial_rotary_factor");
    if (!type_may_be_absent || !only_theta)
      parent.fail(key, "has neither 'rope_type' nor 'type'");
    return rope;
  }
  if (*type == "default")  // transformers' spelling of "no scaling"
    return rope;
  if (*type == "linear") {
    rope.type = rope_scaling::kind::linear;
    rope.factor = reader.positive_number("factor", std::nullopt);
    return rope;
  }
  if (*type == "llama3") {
    rope.type = rope_scaling::kind::llama3;
    rope.factor = reader.positive_number("factor", std::nullopt);
    rope.low_freq_factor = reader.positive_number("low_freq_factor", std::nullopt);
    rope.high_freq_factor = reader.positive_number("high_freq_factor", std::nullopt);
    auto original = reader.optional_positive_int("original_max_position_embeddings");
    if (!original)
      reader.fail("original_max_position_embeddings", "is missing");
    rope.original_max_position_embeddings = *original;
    // llama3 interpolates between the two wavelengths; equal factors would divide by zero.
    if (!(rope.high_freq_factor > rope.low_freq_factor))
      reader.fail("high_freq_factor", fmt::format("must be greater than low_freq_factor ({} <= {})",
                                                  rope.high_freq_factor, rope.low_freq_factor));
    return rope;
  }
  parent.fail(
      key, fmt::format("has type '{}', which actorllm does not support (supported: default, linear, llama3)", *type));
}

std::string describe(const rope_scaling& r) {
  switch (r.type) {
    case rope_scaling::kind::none:
      return "no scaling";
    case rope_scaling::kind::linear:
      return fmt::format("linear, factor {}", r.factor);
    case rope_scaling::kind::llama3:
      return fmt::format(
          "llama3, factor {}, low_freq_factor {}, high_freq_factor {}, "
          "original_max_position_embeddings {}",
          r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings);
  }
  return "?";
}

/// What one rope_parameters object says: its scaling, and its rope_theta when it has one.
struct rope_entry {
  std::string name;  ///< dotted field name of the object, for messages
  std::optional<double> theta;
  rope_scaling scaling;
};

rope_entry parse_rope_entry(const field_reader& parent, std::string_view key, simdjson::dom::object obj) {
  field_reader reader = parent.child(key, obj);
  rope_entry entry{parent.full_name(key), std::nullopt, parse_scaling_object(parent, key, reader, true)};
  if (reader.find("rope_theta"))
    entry.theta = reader.positive_number("rope_theta", std::nullopt);
  return entry;
}

/// rope_theta and the rope scaling, from either layout. transformers 5 writes one `rope_parameters` object holding
/// rope_theta and the scaling keys; older versions write top-level `rope_theta` and `rope_scaling`. Both are read;
/// when both layouts are present they must agree (transformers would silently prefer one, and a checkpoint whose two
/// layouts disagree was edited by hand: which one its author meant is a guess). A rope_parameters keyed by layer
/// type ({"full_attention": {...}, "sliding_attention": {...}}, written for models whose layer kinds rotate
/// differently) is accepted only when every entry says the same, since actorllm applies one rotary embedding to
/// every layer.
void parse_rope(const field_reader& fields, model_config& cfg) {
  std::optional<double> old_theta;
  if (fields.find("rope_theta"))
    old_theta = fields.positive_number("rope_theta", std::nullopt);
  std::optional<rope_scaling> old_scaling;
  if (auto e = fields.find("rope_scaling")) {
    if (e->type() != element_type::OBJECT)
      fields.fail("rope_scaling", fmt::format("must be an object or null, got {}", json::type_name(*e)));
    old_scaling =
        parse_scaling_object(fields, "rope_scaling", fields.child("rope_scaling", json::as_object(*e)), false);
  }

  auto params = fields.find("rope_parameters");
  if (!params) {
    cfg.rope_theta = old_theta.value_or(10000.0);
    cfg.rope = old_scaling.value_or(rope_scaling{});
    return;
  }
  if (params->type() != element_type::OBJECT)
    fields.fail("rope_parameters", fmt::format("must be an object or null, got {}", json::type_name(*params)));
  auto obj = json::as_object(*params);

  bool per_layer_type = false;
  for (auto [k, v] : obj)
    per_layer_type = per_layer_type || v.type() == element_type::OBJECT;
  rope_entry chosen;
  if (!per_layer_type) {
    chosen = parse_rope_entry(fields, "rope_parameters", obj);
  } else {
    field_reader by_type = fields.child("rope_parameters", obj);
    std::vector<rope_entry> entries;
    for (auto [k, v] : obj) {
      if (v.type() != element_type::OBJECT)
        by_type.fail(k, fmt::format("is {}, but rope_parameters is keyed by layer type (its other entries are "
                                    "objects), so every entry must be an object",
                                    json::type_name(v)));
      entries.push_back(parse_rope_entry(by_type, k, json::as_object(v)));
      // An entry without rope_theta takes the top-level one (transformers' setdefault), so compare resolved values.
      entries.back().theta = entries.back().theta ? entries.back().theta : old_theta;
    }
    for (const auto& e : entries) {
      const auto& first = entries.front();
      if (e.theta != first.theta || e.scaling != first.scaling)
        fields.fail("rope_parameters",
                    fmt::format("is keyed by layer type and its entries differ ('{}': rope_theta {}, {}; '{}': "
                                "rope_theta {}, {}); actorllm applies one rotary embedding to every layer",
                                first.name, first.theta.value_or(10000.0), describe(first.scaling), e.name,
                                e.theta.value_or(10000.0), describe(e.scaling)));
    }
    chosen = entries.front();
  }

  if (chosen.theta && old_theta && *chosen.theta != *old_theta)
    fields.fail(chosen.name + ".rope_theta",
                fmt::format("({}) disagrees with field 'rope_theta' ({})", *chosen.theta, *old_theta));
  if (old_scaling && *old_scaling != chosen.scaling)
    fields.fail(chosen.name, fmt::format("({}) disagrees with field 'rope_scaling' ({})", describe(chosen.scaling),
                                         describe(*old_scaling)));
  cfg.rope_theta = chosen.theta.value_or(old_theta.value_or(10000.0));
  cfg.rope = chosen.scaling;
}

/// Settings of neighbouring model families (Gemma, Granite, Mixtral/Qwen-MoE, Phi/NeoX-style partial rotary) that
/// change the forward pass when they have a non-neutral value. A Llama/Mistral/Qwen2/Qwen3 config never carries
/// them with such a value, so one that does is not the model it claims to be, and serving it with plain Llama math
/// would produce fluent-looking garbage. Keys that do not change inference (dropout, use_cache, initializer_range,
/// pretraining_tp: an exact re-split of the same matmuls) stay ignored.
void refuse_unsupported_math(const field_reader& fields, const model_config& cfg) {
  refuse_partial_rotary(fields);
  // Gemma-2-style tanh softcapping of attention scores and of the final logits; null means off.
  for (std::string_view key : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (auto e = fields.find(key))
      fields.fail(key, fmt::format("is set ({}), but actorllm does not implement logit softcapping",
                                   e->is_number() ? fmt::format("{}", fields.as_number(key, *e))
                                                  : std::string(json::type_name(*e))));
  // Granite scales the embeddings, each residual branch and the logits by these; 1 is neutral.
  for (std::string_view key : {"embedding_multiplier", "residual_multiplier", "logits_scaling"})
    if (auto e = fields.find(key); e && fields.as_number(key, *e) != 1.0)
      fields.fail(key, fmt::format("is {}, but actorllm implements no Granite-style multipliers (only 1)",
                                   fields.as_number(key, *e)));
  // Granite's attention_multiplier replaces the 1/sqrt(head_dim) score scale, so that value is the neutral one.
  if (auto e = fields.find("attention_multiplier")) {
    const double v = fields.as_number("attention_multiplier", *e);
    const double neutral = 1.0 / std::sqrt(static_cast<double>(cfg.head_dim));
    if (!(std::abs(v - neutral) <= 1e-6 * neutral))
      fields.fail("attention_multiplier",
                  fmt::format("is {}, but actorllm scales attention scores by 1/sqrt(head_dim) = {}", v, neutral));
  }
  // Mixture-of-experts MLPs: the dense architectures have one MLP per layer (the MoE ones are read by parse_moe).
  if (cfg.n_expert > 0)
    return;
  for (std::string_view key : {"num_experts", "num_local_experts"})
    if (auto e = fields.find(key); e && fields.as_int(key, *e) > 0)
      fields.fail(key, fmt::format("is {}, but {} is a dense architecture and actorllm implements no "
                                   "mixture-of-experts layers",
                                   fields.as_int(key, *e), cfg.architecture));
}

/// layer_types (transformers >= 4.53): "full_attention" or "sliding_attention" per layer, as true = sliding.
std::optional<std::vector<bool>> parse_layer_types(const field_reader& fields, int64_t n_layer) {
  auto e = fields.find("layer_types");
  if (!e)
    return std::nullopt;
  if (e->type() != element_type::ARRAY)
    fields.fail("layer_types", fmt::format("must be a list of strings, got {}", json::type_name(*e)));
  auto list = json::as_array(*e);
  if (static_cast<int64_t>(list.size()) != n_layer)
    fields.fail("layer_types", fmt::format("has {} entries, but num_hidden_layers is {}", list.size(), n_layer));
  std::vector<bool> sliding;
  for (element item : list) {
    const std::string key = fmt::format("layer_types[{}]", sliding.size());
    if (item.type() != element_type::STRING)
      fields.fail(key, fmt::format("must be a string, got {}", json::type_name(item)));
    std::string_view kind = item.get_string().value_unsafe();
    if (kind != "full_attention" && kind != "sliding_attention")
      fields.fail(key, fmt::format("is '{}', which actorllm does not support (supported: full_attention, "
                                   "sliding_attention)",
                                   kind));
    sliding.push_back(kind == "sliding_attention");
  }
  return sliding;
}

/// The window `sliding_window` names: the class default when the key is absent, none (0) when it is null.
int64_t window_value(const field_reader& fields, int64_t default_when_absent) {
  auto e = fields.find("sliding_window", false);
  if (!e)
    return default_when_absent;
  if (e->is_null())
    return 0;
  return fields.as_size("sliding_window", *e);
}

/// Per-layer windows as transformers resolves them (see model_config::layer_window).
std::vector<int64_t> parse_layer_windows(const field_reader& fields, const model_config& cfg) {
  const auto n = static_cast<size_t>(cfg.n_layer);
  if (cfg.model_type == "mistral" || cfg.model_type == "mixtral") {
    // MistralConfig: sliding_window defaults to 4096, null switches it off; it has no use_sliding_window.
    // MixtralConfig: the same rule, but its default is None.
    const int64_t window = window_value(fields, cfg.model_type == "mixtral" ? 0 : 4096);
    // transformers' Mistral ignores layer_types (with a warning pointing at Ministral); a list that asks for
    // something else than the uniform behaviour was written for alternating attention, which Mistral's code lacks.
    if (auto types = parse_layer_types(fields, cfg.n_layer))
      for (size_t i = 0; i < n; ++i)
        if ((*types)[i] != (window > 0))
          fields.fail(fmt::format("layer_types[{}]", i),
                      fmt::format("is '{}', but {} applies sliding_window ({}) to every layer; "
                                  "alternating attention (Ministral) is not supported",
                                  (*types)[i] ? "sliding_attention" : "full_attention", cfg.architecture,
                                  window > 0 ? fmt::format("{}", window) : std::string("null")));
    return std::vector<int64_t>(n, window);
  }
  if (cfg.model_type == "qwen2" || cfg.model_type == "qwen3" || cfg.model_type == "qwen2_moe" ||
      cfg.model_type == "qwen3_moe") {
    // Qwen2Config / Qwen3Config: use_sliding_window false (default) nulls sliding_window (default 4096); without
    // layer_types, the window applies to layers i >= max_window_layers (default 28).
    const int64_t window = fields.optional_bool("use_sliding_window", false) ? window_value(fields, 4096) : 0;
    const int64_t max_window_layers = fields.non_negative_int("max_window_layers", 28);
    std::vector<int64_t> windows(n, 0);
    auto types = parse_layer_types(fields, cfg.n_layer);
    for (size_t i = 0; i < n; ++i) {
      if (types) {
        // transformers refuses to build the sliding mask without a window; so do we.
        if ((*types)[i] && window == 0)
          fields.fail(fmt::format("layer_types[{}]", i),
                      "is 'sliding_attention', but there is no window (sliding_window is null or "
                      "use_sliding_window is not true)");
        windows[i] = (*types)[i] ? window : 0;
      } else {
        windows[i] = static_cast<int64_t>(i) >= max_window_layers ? window : 0;
      }
    }
    return windows;
  }
  // HF Llama has no sliding window: LlamaConfig keeps an unknown `sliding_window` / `layer_types` as plain
  // attributes and its attention never reads them, so the model attends to everything and so do we.
  return std::vector<int64_t>(n, 0);
}

/// The mixture-of-experts keys of MixtralForCausalLM (num_local_experts, num_experts_per_tok; experts as wide as
/// intermediate_size; top-k always renormalised), Qwen2MoeForCausalLM (num_experts, num_experts_per_tok,
/// moe_intermediate_size, shared_expert_intermediate_size, norm_topk_prob, decoder_sparse_step, mlp_only_layers) and
/// Qwen3MoeForCausalLM (the same without the shared expert). Defaults are transformers' config classes'. Routing
/// knobs that change inference and are not implemented (grouped top-k, routed scaling, other scoring functions) are
/// refused by name; training-only ones (router_aux_loss_coef, output_router_logits, router_jitter_noise) are ignored.
void parse_moe(const field_reader& fields, model_config& cfg) {
  // By architecture, not model_type: the class decides which module transformers builds.
  const bool mixtral = cfg.architecture == "MixtralForCausalLM";
  const bool qwen2_moe = cfg.architecture == "Qwen2MoeForCausalLM";
  if (!mixtral && !qwen2_moe && cfg.architecture != "Qwen3MoeForCausalLM")
    return;
  const std::string_view experts_key = mixtral ? "num_local_experts" : "num_experts";
  // MixtralConfig: 8 experts, top 2; Qwen2MoeConfig: 60, top 4; Qwen3MoeConfig: 128, top 8.
  cfg.n_expert = fields.optional_positive_int(experts_key).value_or(mixtral ? 8 : (qwen2_moe ? 60 : 128));
  cfg.n_expert_used = fields.optional_positive_int("num_experts_per_tok").value_or(mixtral ? 2 : (qwen2_moe ? 4 : 8));
  if (cfg.n_expert_used > cfg.n_expert)
    fields.fail("num_experts_per_tok",
                fmt::format("({}) is larger than {} ({})", cfg.n_expert_used, experts_key, cfg.n_expert));
  if (mixtral) {
    cfg.n_ff_exp = cfg.n_ff;
    cfg.norm_topk_prob = true;  // MixtralSparseMoeBlock always renormalises; its config has no such key
    if (auto e = fields.find("norm_topk_prob"); e && !fields.optional_bool("norm_topk_prob", true))
      fields.fail("norm_topk_prob", "is false, but Mixtral always renormalises the top-k routing weights");
  } else {
    cfg.n_ff_exp = fields.optional_positive_int("moe_intermediate_size").value_or(qwen2_moe ? 1408 : 768);
    cfg.norm_topk_prob = fields.optional_bool("norm_topk_prob", false);
    if (qwen2_moe)
      cfg.n_ff_shexp = fields.optional_positive_int("shared_expert_intermediate_size").value_or(5632);
    else if (auto e = fields.find("shared_expert_intermediate_size");
             e && fields.as_int("shared_expert_intermediate_size", *e) > 0)
      fields.fail("shared_expert_intermediate_size",
                  "is set, but Qwen3MoeForCausalLM has no shared expert (that is Qwen2MoeForCausalLM)");
  }
  cfg.layer_moe.assign(static_cast<size_t>(cfg.n_layer), true);
  if (!mixtral) {
    const int64_t step = fields.optional_positive_int("decoder_sparse_step").value_or(1);
    for (int64_t l = 0; l < cfg.n_layer; ++l)
      cfg.layer_moe[static_cast<size_t>(l)] = (l + 1) % step == 0;
    if (auto e = fields.find("mlp_only_layers")) {
      if (e->type() != element_type::ARRAY)
        fields.fail("mlp_only_layers", fmt::format("must be a list of layer indices, got {}", json::type_name(*e)));
      for (element item : json::as_array(*e)) {
        const int64_t l = fields.as_int("mlp_only_layers", item);
        if (l < 0 || l >= cfg.n_layer)
          fields.fail("mlp_only_layers", fmt::format("names layer {}, outside num_hidden_layers ({})", l, cfg.n_layer));
        cfg.layer_moe[static_cast<size_t>(l)] = false;
      }
    }
  }
  // DeepSeek-style routing: these change which experts run and how their outputs are weighted.
  for (std::string_view key : {"n_group", "topk_group", "n_routed_experts", "first_k_dense_replace"})
    if (auto e = fields.find(key); e && fields.as_int(key, *e) > 0)
      fields.fail(key, fmt::format("is {}, but actorllm implements no grouped (DeepSeek-style) expert routing",
                                   fields.as_int(key, *e)));
  if (auto e = fields.find("routed_scaling_factor"); e && fields.as_number("routed_scaling_factor", *e) != 1.0)
    fields.fail("routed_scaling_factor", "is not 1, but actorllm does not scale the routed experts' outputs");
  if (auto f = fields.optional_string("scoring_func"); f && *f != "softmax")
    fields.fail("scoring_func", fmt::format("is '{}', but actorllm routes with a softmax only", *f));
  if (fields.optional_bool("moe_router_bias", false))
    fields.fail("moe_router_bias", "is true, but actorllm's routers have no bias");
}

}  // namespace

rope_config model_config::rope_cfg() const { return rope_config{head_dim, rope_theta, rope}; }

int64_t model_config::window_for(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(layer_window.size()))
    return 0;
  return layer_window[static_cast<size_t>(layer)];
}

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
                            "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
                            "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM)",
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

  parse_rope(fields, cfg);
  parse_moe(fields, cfg);
  refuse_unsupported_math(fields, cfg);
  cfg.rms_norm_eps = static_cast<float>(fields.positive_number("rms_norm_eps", 1e-6));
  cfg.tie_word_embeddings = fields.optional_bool("tie_word_embeddings", false);

  // Qwen2's attention always has q/k/v biases (and none on o_proj); its config carries no attention_bias key.
  if (cfg.model_type == "qwen2" || cfg.model_type == "qwen2_moe") {
    cfg.attention_bias = true;
    cfg.o_proj_bias = false;
  } else {
    cfg.attention_bias = fields.optional_bool("attention_bias", false);
    cfg.o_proj_bias = cfg.attention_bias;
  }
  cfg.qk_norm = cfg.model_type == "qwen3" || cfg.model_type == "qwen3_moe";

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

  cfg.layer_window = parse_layer_windows(fields, cfg);
  for (std::string_view key : {"quantization_config", "compression_config"})
    if (auto q = fields.find(key)) {
      if (q->type() != element_type::OBJECT)
        fields.fail(key, fmt::format("must be an object, got {}", json::type_name(*q)));
      cfg.quant = parse_quantization_config(simdjson::minify(*q), origin);
      break;
    }
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
