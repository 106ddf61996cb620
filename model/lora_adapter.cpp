// Reading PEFT LoRA adapters: adapter_config.json's keys checked one by one (a key that changes the math refused
// unless it holds its default), every tensor name of adapter_model.safetensors parsed into (layer, module, A or B)
// and checked against the base model's Linear shapes, and the matrices cut for a shard by the base weights' own
// slice_for, so an adapter can never be sliced differently from the weight it modifies.
#include "model/lora_adapter.hpp"

#include "kernels/dtype.hpp"
#include "model/json_util.hpp"
#include "model/model_error.hpp"
#include "model/safetensors.hpp"
#include "model/text_file.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <optional>
// GCC 12 reports its own <regex> (std::function inside the NFA's states) as maybe-uninitialized at -O1, the
// sanitizer build's level: a false positive in the library's lines. Silenced around the include only, where those
// lines are attributed, so this file's own code stays fully checked.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#include <unordered_map>
#include <utility>

namespace actorllm::model {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

constexpr std::array<std::string_view, n_lora_targets> module_names{"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                                    "gate_proj", "up_proj", "down_proj"};

constexpr std::array<lora_target, n_lora_targets> all_targets{lora_target::q,   lora_target::k,    lora_target::v,
                                                              lora_target::o,   lora_target::gate, lora_target::up,
                                                              lora_target::down};

constexpr std::string_view peft_prefix = "base_model.model.";

size_t index_of(lora_target t) { return static_cast<size_t>(t); }
bool is_attention(lora_target t) { return index_of(t) <= index_of(lora_target::o); }

/// "model.layers.3.self_attn.q_proj": the module's name in the Hugging Face model, which target_modules matches.
std::string module_path(int64_t layer, lora_target t) {
  return fmt::format("model.layers.{}.{}.{}", layer, is_attention(t) ? "self_attn" : "mlp", lora_target_module(t));
}

/// The PEFT name of a module's lora_A ('A') or lora_B ('B') weight.
std::string lora_tensor_name(int64_t layer, lora_target t, char ab) {
  return fmt::format("{}{}.lora_{}.weight", peft_prefix, module_path(layer, t), ab);
}

/// Whether `layer` has module `t`: attention everywhere, the dense MLP only off the mixture-of-experts layers.
bool has_module(const model_config& cfg, int64_t layer, lora_target t) {
  return is_attention(t) || !cfg.is_moe_layer(layer);
}

/// target_modules or exclude_modules, matched as PEFT matches them against a module's full name
/// (check_target_module_exists): a list matches a name equal to an entry or ending in "." + entry; a string is a
/// regular expression that must match the whole name; "all-linear" (any case, target_modules only) is every Linear
/// layer but the output one.
struct module_matcher {
  enum class kind : uint8_t { absent, list, regex, all_linear };
  kind how = kind::absent;
  std::vector<std::string> names;
  std::string pattern;
  std::regex re;

  bool stated() const { return how != kind::absent; }
  bool matches(std::string_view module) const {
    switch (how) {
      case kind::absent:
        return false;
      case kind::all_linear:
        return module != "lm_head" && module != "model.embed_tokens";
      case kind::list:
        return std::any_of(names.begin(), names.end(), [&](const std::string& n) {
          return module == n ||
                 (module.size() > n.size() && module.ends_with(n) && module[module.size() - n.size() - 1] == '.');
        });
      case kind::regex:
        return std::regex_match(module.begin(), module.end(), re);
    }
    return false;
  }
  /// The value as adapter_config.json writes it, for messages.
  std::string text() const {
    switch (how) {
      case kind::absent:
        return "null";
      case kind::list:
        return fmt::format("[{}]", fmt::join(names, ", "));
      case kind::regex:
      case kind::all_linear:
        return fmt::format("'{}'", pattern);
    }
    return "?";
  }
};

/// adapter_config.json once checked.
struct adapter_config {
  int64_t rank = 0;
  double alpha = 0;
  bool rslora = false;
  module_matcher targets;  ///< absent (null or no key): the tensors alone say which modules are modified
  module_matcher exclude;
};

/// The keys of adapter_config.json, with errors naming the file and the key.
class config_fields {
 public:
  config_fields(object obj, std::string origin) : obj_(obj), origin_(std::move(origin)) {}

  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    throw model_error(fmt::format("{}: key '{}' {}", origin_, key, what));
  }
  /// The value of `key`; nullopt when absent or null.
  std::optional<element> find(std::string_view key) const {
    element e;
    if (obj_.at_key(key).get(e) != simdjson::SUCCESS || e.is_null())
      return std::nullopt;
    return e;
  }
  std::optional<std::string> string(std::string_view key) const {
    auto e = find(key);
    if (!e)
      return std::nullopt;
    if (e->type() != element_type::STRING)
      fail(key, fmt::format("must be a string, got {}", json::type_name(*e)));
    return std::string(e->get_string().value_unsafe());
  }
  bool boolean(std::string_view key) const {
    auto e = find(key);
    if (!e)
      return false;
    if (e->type() != element_type::BOOL)
      fail(key, fmt::format("must be true or false, got {}", json::type_name(*e)));
    return e->get_bool().value_unsafe();
  }
  /// True when `key` holds something other than null, an empty list, an empty object or an empty string: the
  /// "nothing" that PEFT's optional per-module settings default to.
  bool has_entries(std::string_view key) const {
    auto e = find(key);
    if (!e)
      return false;
    switch (e->type()) {
      case element_type::ARRAY:
        return json::as_array(*e).size() != 0;
      case element_type::OBJECT:
        return json::as_object(*e).size() != 0;
      case element_type::STRING:
        return !e->get_string().value_unsafe().empty();
      default:
        return true;
    }
  }
  module_matcher matcher(std::string_view key, bool allow_all_linear) const {
    module_matcher m;
    auto e = find(key);
    if (!e)
      return m;
    if (e->type() == element_type::ARRAY) {
      m.how = module_matcher::kind::list;
      for (element item : json::as_array(*e)) {
        if (item.type() != element_type::STRING)
          fail(key, fmt::format("must be a list of module names or a regular expression, found {} in the list",
                                json::type_name(item)));
        m.names.emplace_back(item.get_string().value_unsafe());
      }
      return m;
    }
    if (e->type() != element_type::STRING)
      fail(key, fmt::format("must be a list of module names or a regular expression, got {}", json::type_name(*e)));
    m.pattern = std::string(e->get_string().value_unsafe());
    std::string lower = m.pattern;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (allow_all_linear && lower == "all-linear") {
      m.how = module_matcher::kind::all_linear;
      return m;
    }
    m.how = module_matcher::kind::regex;
    try {
      m.re = std::regex(m.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& err) {
      fail(key, fmt::format("is '{}', which is not a regular expression this engine can read ({}); PEFT matches a "
                            "string target_modules as a Python regular expression against whole module names",
                            m.pattern, err.what()));
    }
    return m;
  }

 private:
  object obj_;
  std::string origin_;
};

adapter_config parse_adapter_config(const std::filesystem::path& dir, const model_config& cfg, int64_t max_lora_rank) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw model_error(fmt::format("{}: LoRA adapter directory does not exist", dir.string()));
  const std::filesystem::path path = dir / "adapter_config.json";
  if (!std::filesystem::exists(path, ec))
    throw model_error(fmt::format("{}: no adapter_config.json there (not a PEFT adapter directory)", dir.string()));
  const std::string origin = path.string();
  const std::string text = read_text_file(path);
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(text).get(root); err != simdjson::SUCCESS)
    throw model_error(fmt::format("{}: not valid JSON: {}", origin, simdjson::error_message(err)));
  if (root.type() != element_type::OBJECT)
    throw model_error(fmt::format("{}: must be a JSON object, got {}", origin, json::type_name(root)));
  const config_fields f(json::as_object(root), origin);
  adapter_config c;

  if (auto type = f.string("peft_type"); type && *type != "LORA")
    f.fail("peft_type", fmt::format("is '{}': only LoRA adapters (\"LORA\") are supported", *type));

  auto r = f.find("r");
  if (!r)
    f.fail("r", "is missing: the adapter's rank is needed");
  if (r->type() != element_type::INT64)
    f.fail("r", fmt::format("must be an integer, got {}", json::type_name(*r)));
  c.rank = r->get_int64().value_unsafe();
  if (c.rank < 1)
    f.fail("r", fmt::format("is {}: the rank must be at least 1", c.rank));
  if (c.rank > max_lora_rank)
    f.fail("r", fmt::format("is {}, above max_lora_rank {} (raise --max-lora-rank to serve this adapter)", c.rank,
                            max_lora_rank));

  auto alpha = f.find("lora_alpha");
  if (!alpha)
    f.fail("lora_alpha", "is missing: the adapter's scaling (lora_alpha / r) is needed");
  switch (alpha->type()) {
    case element_type::INT64:
      c.alpha = static_cast<double>(alpha->get_int64().value_unsafe());
      break;
    case element_type::DOUBLE:
      c.alpha = alpha->get_double().value_unsafe();
      break;
    default:
      f.fail("lora_alpha", fmt::format("must be a number, got {}", json::type_name(*alpha)));
  }
  if (!std::isfinite(c.alpha))
    f.fail("lora_alpha", "must be a finite number");
  c.rslora = f.boolean("use_rslora");

  // The keys that change what the adapter computes, each refused unless it holds PEFT's default. The rest
  // (base_model_name_or_path, task_type, inference_mode, lora_dropout, init_lora_weights, revision, ...) only
  // describe training or initialisation and are ignored.
  if (f.boolean("use_dora"))
    f.fail("use_dora", "is true: DoRA (weight-decomposed LoRA) adapters are not supported");
  if (auto bias = f.string("bias"); bias && *bias != "none")
    f.fail("bias", fmt::format("is '{}': adapters that train the base model's biases are not supported (\"none\" only)",
                               *bias));
  if (f.boolean("lora_bias"))
    f.fail("lora_bias", "is true: LoRA adapters with a bias on lora_B are not supported");
  if (f.has_entries("modules_to_save"))
    f.fail("modules_to_save", "is set: adapters that carry fully trained copies of modules are not supported");
  if (f.boolean("fan_in_fan_out"))
    f.fail("fan_in_fan_out", "is true: adapters stored transposed (for Conv1D layers) are not supported");
  if (f.find("layers_to_transform"))
    f.fail("layers_to_transform", "is set: adapters limited to some layers are not supported");
  if (f.has_entries("layers_pattern"))
    f.fail("layers_pattern", "is set: adapters limited to some layers are not supported");
  if (f.has_entries("rank_pattern"))
    f.fail("rank_pattern", "has entries: per-module ranks are not supported");
  if (f.has_entries("alpha_pattern"))
    f.fail("alpha_pattern", "has entries: per-module lora_alpha values are not supported");
  if (f.boolean("use_qalora"))
    f.fail("use_qalora", "is true: QA-LoRA adapters are not supported");
  if (f.find("layer_replication"))
    f.fail("layer_replication", "is set: adapters that replicate base layers are not supported");
  if (f.find("trainable_token_indices"))
    f.fail("trainable_token_indices", "is set: adapters that train embedding rows are not supported");
  if (f.has_entries("target_parameters"))
    f.fail("target_parameters", "is set: LoRA on parameters (rather than Linear modules) is not supported");
  if (f.find("alora_invocation_tokens"))
    f.fail("alora_invocation_tokens", "is set: activated LoRA (aLoRA) adapters are not supported");
  if (f.find("arrow_config"))
    f.fail("arrow_config", "is set: Arrow routing between adapters is not supported");

  c.targets = f.matcher("target_modules", true);
  c.exclude = f.matcher("exclude_modules", false);
  for (std::string_view refused : {"model.embed_tokens", "lm_head"})
    if (c.targets.matches(refused) && !c.exclude.matches(refused))
      f.fail("target_modules", fmt::format("is {}, which matches {}: LoRA on the embeddings or the lm_head is not "
                                           "supported",
                                           c.targets.text(), refused));
  if (c.targets.stated()) {
    // An adapter modifies a module in every layer that has it, or in none (what layers_to_transform would change).
    for (lora_target t : all_targets) {
      std::vector<int64_t> hit, missed;
      for (int64_t layer = 0; layer < cfg.n_layer; ++layer) {
        if (!has_module(cfg, layer, t))
          continue;
        const std::string module = module_path(layer, t);
        (c.targets.matches(module) && !c.exclude.matches(module) ? hit : missed).push_back(layer);
      }
      if (!hit.empty() && !missed.empty())
        f.fail("target_modules",
               fmt::format("is {}, which matches {} in layers [{}] but not in layers [{}]: adapters "
                           "that modify a module in only some layers are not supported",
                           c.targets.text(), lora_target_module(t), fmt::join(hit, ", "), fmt::join(missed, ", ")));
    }
  }
  return c;
}

/// A tensor name split as PEFT writes it: base_model.model.<module>.lora_A|lora_B[.<adapter name>].weight.
struct parsed_name {
  int64_t layer = -1;
  lora_target target = lora_target::q;
  int ab = 0;  ///< 0: lora_A, 1: lora_B
};

parsed_name parse_tensor_name(const std::string& file, const std::string& name, const model_config& cfg) {
  auto refuse = [&](std::string_view why) -> parsed_name {
    throw model_error(fmt::format("{}: tensor '{}' {}", file, name, why));
  };
  const std::string_view expected =
      "; a LoRA adapter holds base_model.model.<module>.lora_A.weight and .lora_B.weight for the modules "
      "model.layers.N.self_attn.{q,k,v,o}_proj and model.layers.N.mlp.{gate,up,down}_proj";
  std::string_view rest = name;
  if (!rest.starts_with(peft_prefix))
    return refuse(fmt::format("is not a PEFT LoRA weight name{}", expected));
  rest.remove_prefix(peft_prefix.size());
  const size_t at = rest.rfind(".lora_");
  if (at == std::string_view::npos) {
    if (rest.ends_with(".bias"))
      return refuse("is a trained bias of the base model, which is not supported (bias must be \"none\")");
    return refuse(
        fmt::format("is not a LoRA weight (a fully trained module, as modules_to_save stores?), which is "
                    "not supported{}",
                    expected));
  }
  const std::string_view module = rest.substr(0, at);
  std::string_view kind = rest.substr(at + 1);  // "lora_A.weight", "lora_B.default.weight", ...
  parsed_name out;
  if (kind.starts_with("lora_A.") || kind.starts_with("lora_B.")) {
    out.ab = kind[5] == 'A' ? 0 : 1;
    kind.remove_prefix(7);
    // "weight", or "<adapter name>.weight" as some savers write it
    if (kind != "weight") {
      const size_t dot = kind.find('.');
      if (dot == 0 || dot == std::string_view::npos || kind.substr(dot + 1) != "weight")
        return refuse(kind == "bias" || kind.ends_with(".bias")
                          ? "is a bias of lora_B (lora_bias), which is not supported"
                          : "is not a lora_A or lora_B weight, which is all this engine applies");
    }
  } else if (kind.starts_with("lora_magnitude_vector")) {
    return refuse("is a DoRA magnitude vector: DoRA adapters are not supported");
  } else if (kind.starts_with("lora_embedding_")) {
    return refuse("is a LoRA weight of an embedding: LoRA on the embeddings is not supported");
  } else {
    return refuse(fmt::format("is a '{}' tensor, which this engine does not apply{}", kind, expected));
  }

  if (module == "lm_head" || module == "model.embed_tokens" || module.ends_with(".embed_tokens") ||
      module.ends_with(".lm_head"))
    return refuse(fmt::format("modifies {}: LoRA on the embeddings or the lm_head is not supported", module));
  auto unknown = [&]() -> parsed_name {
    return refuse(fmt::format("modifies module '{}', which this engine does not apply LoRA to{}", module, expected));
  };
  std::string_view m = module;
  if (!m.starts_with("model.layers."))
    return unknown();
  m.remove_prefix(std::string_view("model.layers.").size());
  const size_t dot = m.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 9 ||
      !std::all_of(m.begin(), m.begin() + static_cast<ptrdiff_t>(dot), [](char c) { return c >= '0' && c <= '9'; }))
    return unknown();
  out.layer = std::stoll(std::string(m.substr(0, dot)));
  m.remove_prefix(dot + 1);
  if (out.layer >= cfg.n_layer)
    return refuse(fmt::format("is for layer {}, but the model has {} layers", out.layer, cfg.n_layer));
  for (lora_target t : all_targets) {
    if (m == fmt::format("{}.{}", is_attention(t) ? "self_attn" : "mlp", lora_target_module(t))) {
      out.target = t;
      if (!has_module(cfg, out.layer, t))
        return refuse(
            fmt::format("modifies the MLP of layer {}, a mixture-of-experts layer: LoRA on MoE layers' "
                        "MLPs is not supported",
                        out.layer));
      return out;
    }
  }
  if (cfg.is_moe_layer(out.layer) && (m.starts_with("mlp.") || m.starts_with("block_sparse_moe.")))
    return refuse(
        fmt::format("modifies {}, part of a mixture-of-experts block: LoRA on MoE layers' MLPs is not "
                    "supported",
                    module));
  return unknown();
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

/// The declarations of the Linear weights an adapter may modify, by name.
std::unordered_map<std::string_view, const weight_decl*> linear_decls(const weight_table& table) {
  std::unordered_map<std::string_view, const weight_decl*> out;
  for (const auto& d : table.weights)
    if (d.linear && d.layer >= 0)
      out.emplace(d.name, &d);
  return out;
}

const weight_decl& base_decl(const std::unordered_map<std::string_view, const weight_decl*>& decls, int64_t layer,
                             lora_target t) {
  const std::string name = module_path(layer, t) + ".weight";
  auto it = decls.find(name);
  if (it == decls.end())
    throw model_error(fmt::format("{}: the base model declares no such weight for a LoRA adapter to modify", name));
  return *it->second;
}

/// An adapter checked against a model: its info, its open file and, per layer of the model and target, its lora_A
/// and lora_B entries (nullptr where it has none).
struct checked_adapter {
  lora_adapter_info info;
  std::unique_ptr<safetensors_file> file;
  std::vector<std::array<std::array<const tensor_info*, 2>, n_lora_targets>> tensors;
};

checked_adapter check_adapter(const std::filesystem::path& dir, const model_config& cfg, int64_t max_lora_rank) {
  if (max_lora_rank < 1)
    throw model_error(fmt::format("max_lora_rank is {}: it must be at least 1", max_lora_rank));
  const adapter_config c = parse_adapter_config(dir, cfg, max_lora_rank);

  std::error_code ec;
  const std::filesystem::path path = dir / "adapter_model.safetensors";
  if (!std::filesystem::exists(path, ec)) {
    if (std::filesystem::exists(dir / "adapter_model.bin", ec))
      throw model_error(
          fmt::format("{}: has adapter_model.bin but no adapter_model.safetensors: .bin adapters are "
                      "pickled Python, never loaded here (convert the adapter to safetensors)",
                      dir.string()));
    throw model_error(fmt::format("{}: no adapter_model.safetensors there", dir.string()));
  }
  checked_adapter out;
  out.file = std::make_unique<safetensors_file>(safetensors_file::open(path));
  const std::string file = path.string();
  out.tensors.resize(static_cast<size_t>(cfg.n_layer));

  const weight_table full = llama_weight_table(cfg, shard_spec{});
  const auto decls = linear_decls(full);
  for (const tensor_info& info : out.file->tensors()) {
    const parsed_name p = parse_tensor_name(file, info.name, cfg);
    const char ab = p.ab == 0 ? 'A' : 'B';
    const std::string path_of_module = module_path(p.layer, p.target);
    if (c.targets.stated() && (!c.targets.matches(path_of_module) || c.exclude.matches(path_of_module)))
      throw model_error(
          fmt::format("{}: tensor '{}' modifies {}, which adapter_config.json's target_modules ({}) "
                      "does not target",
                      file, info.name, path_of_module, c.targets.text()));
    const tensor_info*& slot = out.tensors[static_cast<size_t>(p.layer)][index_of(p.target)][static_cast<size_t>(p.ab)];
    if (slot != nullptr)
      throw model_error(fmt::format("{}: tensors '{}' and '{}' are both lora_{} of {}", file, slot->name, info.name, ab,
                                    path_of_module));
    slot = &info;
    if (!info.is_float())
      throw model_error(fmt::format("{}: tensor '{}' has dtype {}; LoRA weights must be F32, F16 or BF16", file,
                                    info.name, stored_type_name(info.stored)));
    const weight_decl& d = base_decl(decls, p.layer, p.target);
    const int64_t n_out = d.shape[0];
    const int64_t n_in = d.shape[1];
    const std::vector<int64_t> expected =
        p.ab == 0 ? std::vector<int64_t>{c.rank, n_in} : std::vector<int64_t>{n_out, c.rank};
    if (info.shape != expected)
      throw model_error(
          fmt::format("{}: tensor '{}' has shape {}, expected {} ({} of {}: r {} from "
                      "adapter_config.json, {} {} of the base weight {})",
                      file, info.name, shape_text(info.shape), shape_text(expected),
                      p.ab == 0 ? "[r, in_features]" : "[out_features, r]", lora_target_module(p.target), c.rank,
                      p.ab == 0 ? "in_features" : "out_features", p.ab == 0 ? n_in : n_out, d.name));
  }

  // Every layer that has a targeted module carries both of its matrices.
  for (lora_target t : all_targets) {
    bool targeted = false;
    if (c.targets.stated()) {
      for (int64_t layer = 0; layer < cfg.n_layer && !targeted; ++layer) {
        const std::string path_of_module = module_path(layer, t);
        targeted = has_module(cfg, layer, t) && c.targets.matches(path_of_module) && !c.exclude.matches(path_of_module);
      }
    } else {
      for (const auto& layer : out.tensors)
        targeted |= layer[index_of(t)][0] != nullptr || layer[index_of(t)][1] != nullptr;
    }
    if (!targeted)
      continue;
    for (int64_t layer = 0; layer < cfg.n_layer; ++layer) {
      if (!has_module(cfg, layer, t))
        continue;
      for (int ab = 0; ab < 2; ++ab)
        if (out.tensors[static_cast<size_t>(layer)][index_of(t)][static_cast<size_t>(ab)] == nullptr)
          throw model_error(fmt::format(
              "{}: tensor '{}' is missing: the adapter modifies {} ({}), so every layer needs its lora_A and lora_B",
              file, lora_tensor_name(layer, t, ab == 0 ? 'A' : 'B'), lora_target_module(t),
              c.targets.stated() ? fmt::format("target_modules is {}", c.targets.text())
                                 : std::string("other layers have tensors for it")));
    }
    out.info.targets[index_of(t)] = true;
  }
  if (std::none_of(out.info.targets.begin(), out.info.targets.end(), [](bool b) { return b; }))
    throw model_error(fmt::format("{}: the adapter modifies no module (target_modules {}; no lora_A/lora_B tensors)",
                                  file, c.targets.text()));

  out.info.rank = c.rank;
  out.info.alpha = c.alpha;
  out.info.scaling =
      c.rslora ? c.alpha / std::sqrt(static_cast<double>(c.rank)) : c.alpha / static_cast<double>(c.rank);
  return out;
}

/// Element `i` (row-major) of a float tensor of `file`, exactly as f32. The mapping promises no alignment.
float element_at(const safetensors_file& file, const tensor_info& info, int64_t i) {
  const std::byte* p = file.data(info) + static_cast<size_t>(i) * stored_type_size(info.stored);
  if (info.stored == stored_type::f32) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return info.stored == stored_type::f16 ? f16_to_f32(h) : bf16_to_f32(h);
}

}  // namespace

std::string_view lora_target_module(lora_target t) { return module_names[index_of(t)]; }

lora_adapter_info inspect_lora_adapter(const std::filesystem::path& dir, const model_config& cfg,
                                       int64_t max_lora_rank) {
  return check_adapter(dir, cfg, max_lora_rank).info;
}

lora_adapter load_lora_adapter(const std::filesystem::path& dir, const model_config& cfg, const shard_spec& shard_in,
                               int64_t max_lora_rank) {
  const shard_spec shard = resolve_shard(cfg, shard_in);
  const checked_adapter c = check_adapter(dir, cfg, max_lora_rank);
  const weight_table table = llama_weight_table(cfg, shard);
  const auto decls = linear_decls(table);
  const int64_t rank = c.info.rank;

  lora_adapter out;
  out.rank = rank;
  out.layers.resize(static_cast<size_t>(shard.layer_end - shard.layer_begin));
  for (int64_t layer = shard.layer_begin; layer < shard.layer_end; ++layer) {
    for (lora_target t : all_targets) {
      const auto& [a_info, b_info] = c.tensors[static_cast<size_t>(layer)][index_of(t)];
      if (!c.info.targets[index_of(t)] || a_info == nullptr)
        continue;  // not targeted, or the MLP of a mixture-of-experts layer
      const weight_decl& d = base_decl(decls, layer, t);
      const tensor_slice s = slice_for(d, shard.tp_rank, shard.tp_size);
      const int64_t n_out = d.shape[0];
      const int64_t n_in = d.shape[1];
      lora_matrices& m = out.layers[static_cast<size_t>(layer - shard.layer_begin)][index_of(t)];
      // Column-parallel (dim 0): this rank's output rows, so B's rows. Row-parallel (dim 1): its input columns, so
      // A's columns; B whole, the base layer's all-reduce summing the ranks' partial updates.
      const bool rows = s.dim == 0;
      const int64_t in_begin = rows ? 0 : s.begin;
      const int64_t out_begin = rows ? s.begin : 0;
      m.in = rows ? n_in : s.end - s.begin;
      m.out = rows ? s.end - s.begin : n_out;
      m.a.resize(static_cast<size_t>(rank * m.in));
      for (int64_t k = 0; k < rank; ++k)
        for (int64_t j = 0; j < m.in; ++j)
          m.a[static_cast<size_t>(k * m.in + j)] = element_at(*c.file, *a_info, k * n_in + in_begin + j);
      m.b.resize(static_cast<size_t>(m.out * rank));
      for (int64_t o = 0; o < m.out; ++o)
        for (int64_t k = 0; k < rank; ++k)
          m.b[static_cast<size_t>(o * rank + k)] = static_cast<float>(
              c.info.scaling * static_cast<double>(element_at(*c.file, *b_info, (out_begin + o) * rank + k)));
    }
  }
  return out;
}

}  // namespace actorllm::model
