// quantization_config parsing: one function per quant_method, each reading the keys its tool writes and refusing,
// by name, every value that would change the math in a way the loader does not implement.
#include "model/quantization_config.hpp"

#include "model/json_util.hpp"
#include "model/model_error.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include <array>

namespace actorllm::model {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

/// The fields of one object of quantization_config, with errors naming "quantization_config.<path>".
class quant_fields {
 public:
  quant_fields(object obj, std::string_view origin, std::string prefix)
      : obj_(obj), origin_(origin), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    throw model_error(fmt::format("{}: field '{}{}' {}", origin_, prefix_, key, what));
  }
  std::optional<element> find(std::string_view key) const {
    element e;
    if (obj_.at_key(key).get(e) != simdjson::SUCCESS || e.is_null())
      return std::nullopt;
    return e;
  }
  quant_fields child(std::string_view key, element e) const {
    if (e.type() != element_type::OBJECT)
      fail(key, fmt::format("must be an object, got {}", json::type_name(e)));
    return quant_fields(json::as_object(e), origin_, fmt::format("{}{}.", prefix_, key));
  }
  std::optional<std::string> string(std::string_view key) const {
    auto e = find(key);
    if (!e)
      return std::nullopt;
    if (e->type() != element_type::STRING)
      fail(key, fmt::format("must be a string, got {}", json::type_name(*e)));
    return std::string(e->get_string().value_unsafe());
  }
  std::optional<int64_t> integer(std::string_view key) const {
    auto e = find(key);
    if (!e)
      return std::nullopt;
    if (e->type() != element_type::INT64)
      fail(key, fmt::format("must be an integer, got {}", json::type_name(*e)));
    return e->get_int64().value_unsafe();
  }
  std::optional<bool> boolean(std::string_view key) const {
    auto e = find(key);
    if (!e)
      return std::nullopt;
    if (e->type() != element_type::BOOL)
      fail(key, fmt::format("must be true or false, got {}", json::type_name(*e)));
    return e->get_bool().value_unsafe();
  }
  std::vector<std::string> strings(std::string_view key) const {
    std::vector<std::string> out;
    auto e = find(key);
    if (!e)
      return out;
    if (e->type() != element_type::ARRAY)
      fail(key, fmt::format("must be a list of strings, got {}", json::type_name(*e)));
    for (element item : json::as_array(*e)) {
      if (item.type() != element_type::STRING)
        fail(key, fmt::format("must be a list of strings, found {}", json::type_name(item)));
      out.emplace_back(item.get_string().value_unsafe());
    }
    return out;
  }
  /// A group size: a positive integer, or -1 / absent for one group per output channel (0 here).
  int64_t group_size(std::string_view key) const {
    const int64_t g = integer(key).value_or(-1);
    if (g == -1)
      return 0;
    if (g <= 0)
      fail(key, fmt::format("must be a positive group size or -1 (per channel), got {}", g));
    return g;
  }
  object obj() const { return obj_; }

 private:
  object obj_;
  std::string_view origin_;
  std::string prefix_;
};

void parse_awq(const quant_fields& f, quantization_config& q) {
  q.bits = static_cast<int>(f.integer("bits").value_or(f.integer("w_bit").value_or(4)));
  if (q.bits != 4)
    f.fail("bits", fmt::format("is {}; AWQ checkpoints are 4-bit", q.bits));
  q.group_size = f.group_size(f.find("group_size") ? "group_size" : "q_group_size");
  if (!f.boolean("zero_point").value_or(true))
    f.fail("zero_point", "is false: AWQ without zero points is not implemented (vLLM refuses it too)");
  q.symmetric = false;
  if (auto version = f.string("version"); version && *version != "gemm" && *version != "GEMM")
    f.fail("version", fmt::format("is '{}': only AutoAWQ's GEMM layout is implemented (gemm)", *version));
  q.ignore = f.strings("modules_to_not_convert");
}

void parse_gptq(const quant_fields& f, quantization_config& q) {
  q.bits = static_cast<int>(f.integer("bits").value_or(4));
  if (q.bits != 4 && q.bits != 8)
    f.fail("bits", fmt::format("is {}: GPTQ is implemented for 4 and 8 bits", q.bits));
  q.group_size = f.group_size("group_size");
  q.symmetric = f.boolean("sym").value_or(true);
  if (f.boolean("desc_act").value_or(false))
    f.fail("desc_act", "is true: act-order GPTQ (a g_idx permutation of the input columns) is not implemented");
  if (auto format = f.string("checkpoint_format"); format) {
    if (*format == "gptq_v2")
      q.gptq_zero_offset = false;
    else if (*format != "gptq")
      f.fail("checkpoint_format", fmt::format("is '{}' (implemented: gptq, gptq_v2)", *format));
  }
  if (auto dynamic = f.find("dynamic");
      dynamic && !(dynamic->type() == element_type::OBJECT && json::as_object(*dynamic).size() == 0))
    f.fail("dynamic", "sets per-module quantization overrides, which are not implemented");
}

void parse_fp8(const quant_fields& f, quantization_config& q) {
  q.bits = 8;
  if (auto scheme = f.string("activation_scheme"); scheme && *scheme != "static" && *scheme != "dynamic")
    f.fail("activation_scheme", fmt::format("is '{}' (expected static or dynamic)", *scheme));
  if (auto block = f.find("weight_block_size")) {
    if (block->type() != element_type::ARRAY || json::as_array(*block).size() != 2)
      f.fail("weight_block_size", "must be [block_out, block_in]");
    int64_t dims[2] = {0, 0};
    int i = 0;
    for (element d : json::as_array(*block)) {
      if (d.type() != element_type::INT64 || d.get_int64().value_unsafe() <= 0)
        f.fail("weight_block_size", "must hold two positive integers");
      dims[i++] = d.get_int64().value_unsafe();
    }
    q.block_out = dims[0];
    q.block_in = dims[1];
  }
  q.ignore = f.strings("ignored_layers");
}

/// The quantization of one side (weights or input_activations) of a compressed-tensors config group.
struct ct_args {
  int bits = 0;
  std::string type;  // "int" or "float"
  bool symmetric = true;
  std::string strategy;  // "tensor", "channel", "group", "token", ...
  int64_t group_size = 0;
  bool dynamic = false;
};

ct_args parse_ct_args(const quant_fields& f) {
  ct_args a;
  a.bits = static_cast<int>(f.integer("num_bits").value_or(8));
  a.type = f.string("type").value_or("int");
  a.symmetric = f.boolean("symmetric").value_or(true);
  a.strategy = f.string("strategy").value_or("tensor");
  a.group_size = f.integer("group_size").value_or(0);
  a.dynamic = f.boolean("dynamic").value_or(false);
  if (auto order = f.find("actorder"); order && !(order->type() == element_type::BOOL && !order->get_bool().value()))
    f.fail("actorder", "is set: activation-ordered groups (a g_idx) are not implemented");
  if (auto block = f.find("block_structure"); block && a.strategy != "block")
    (void)block;  // informational unless the strategy is "block"
  return a;
}

void parse_compressed_tensors(const quant_fields& f, quantization_config& q) {
  const std::string format = f.string("format").value_or("");
  if (format == "pack-quantized")
    q.format = ct_format::pack_quantized;
  else if (format == "int-quantized")
    q.format = ct_format::int_quantized;
  else if (format == "naive-quantized")
    q.format = ct_format::naive_quantized;
  else if (format == "float-quantized")
    q.format = ct_format::float_quantized;
  else
    f.fail("format", fmt::format("is '{}' (implemented: pack-quantized, int-quantized, naive-quantized, "
                                 "float-quantized)",
                                 format));
  if (auto kv = f.find("kv_cache_scheme"))
    f.fail("kv_cache_scheme", "is set: quantized KV-cache scales from the checkpoint are not implemented");
  if (auto sparsity = f.find("sparsity_config");
      sparsity && !(sparsity->type() == element_type::OBJECT && json::as_object(*sparsity).size() == 0))
    f.fail("sparsity_config", "is set: sparse (2:4) compressed-tensors checkpoints are not implemented");
  if (auto status = f.string("quantization_status"); status && *status != "compressed" && *status != "frozen")
    f.fail("quantization_status", fmt::format("is '{}': only compressed checkpoints load", *status));
  q.ignore = f.strings("ignore");

  auto groups_el = f.find("config_groups");
  if (!groups_el)
    f.fail("config_groups", "is missing");
  const quant_fields groups = f.child("config_groups", *groups_el);
  if (groups.obj().size() != 1)
    groups.fail("", fmt::format("has {} groups: one group for every Linear layer is implemented", groups.obj().size()));
  for (auto [name, value] : groups.obj()) {
    const quant_fields group = groups.child(name, value);
    const std::vector<std::string> targets = group.strings("targets");
    if (targets != std::vector<std::string>{"Linear"})
      group.fail("targets",
                 fmt::format("is [{}]: a group targeting every Linear layer is implemented", fmt::join(targets, ", ")));
    if (group.find("output_activations"))
      group.fail("output_activations", "is set: output activation quantization is not implemented");
    auto weights_el = group.find("weights");
    if (!weights_el)
      group.fail("weights", "is missing");
    const quant_fields wf = group.child("weights", *weights_el);
    const ct_args w = parse_ct_args(wf);
    q.bits = w.bits;
    q.symmetric = w.symmetric;
    if (w.strategy == "group") {
      if (w.group_size <= 0)
        wf.fail("group_size", fmt::format("is {}: the group strategy needs a positive group size", w.group_size));
      q.group_size = w.group_size;
    } else if (w.strategy == "channel") {
      q.group_size = 0;
    } else if (w.strategy == "tensor" && q.format == ct_format::float_quantized) {
      q.group_size = 0;  // one scale, read as every channel's
    } else {
      wf.fail("strategy", fmt::format("is '{}' (implemented: group, channel; tensor for fp8)", w.strategy));
    }
    if (q.format == ct_format::float_quantized) {
      if (w.type != "float" || w.bits != 8)
        wf.fail("type", fmt::format("is {} {}-bit, but float-quantized holds fp8 weights", w.type, w.bits));
      q.bits = 8;
      q.symmetric = true;
    } else {
      if (w.type != "int")
        wf.fail("type", fmt::format("is '{}' in a {} checkpoint (expected int)", w.type, format));
      if (q.format == ct_format::pack_quantized ? (w.bits != 4 && w.bits != 8) : w.bits != 8)
        wf.fail("num_bits",
                fmt::format("is {} (implemented: {})", w.bits, q.format == ct_format::pack_quantized ? "4, 8" : "8"));
      if (!w.symmetric)
        wf.fail("symmetric",
                "is false: asymmetric compressed-tensors weights (weight_zero_point) are not "
                "implemented");
    }
    if (auto act_el = group.find("input_activations")) {
      const quant_fields af = group.child("input_activations", *act_el);
      const ct_args a = parse_ct_args(af);
      if (q.format == ct_format::float_quantized) {
        // fp8 activations: the weights run weight-only (as vLLM's Marlin fp8 path does on GPUs without fp8 units).
      } else if (q.format == ct_format::pack_quantized) {
        af.fail("", "are quantized, but pack-quantized checkpoints here are weight-only (W4A16, W8A16)");
      } else {
        if (a.type != "int" || a.bits != 8)
          af.fail("num_bits", fmt::format("is {} {}-bit: int8 activations are implemented", a.type, a.bits));
        if (!a.dynamic)
          af.fail("dynamic",
                  "is false: static activation scales (input_scale) are not implemented; dynamic "
                  "per-token int8 is");
        if (!a.symmetric)
          af.fail("symmetric", "is false: asymmetric int8 activations are not implemented");
        if (a.strategy != "token")
          af.fail("strategy", fmt::format("is '{}': dynamic int8 activations are implemented per token", a.strategy));
        if (q.group_size != 0)
          wf.fail("strategy", "is group: W8A8 is implemented with per-channel weight scales");
        q.activations = activation_quant::int8_per_token;
      }
    }
  }
}

}  // namespace

std::string_view quant_method_name(quant_method m) {
  switch (m) {
    case quant_method::none:
      return "none";
    case quant_method::fp8:
      return "fp8";
    case quant_method::awq:
      return "awq";
    case quant_method::gptq:
      return "gptq";
    case quant_method::compressed_tensors:
      return "compressed-tensors";
  }
  return "?";
}

std::string quantization_config::describe() const {
  if (method == quant_method::none)
    return "none";
  if (method == quant_method::fp8 && quantize_at_load)
    return "fp8 (quantized at load, per-channel scales)";
  const std::string group = group_size > 0 ? fmt::format("g{}", group_size) : "per-channel";
  std::string s(quant_method_name(method));
  if (method == quant_method::compressed_tensors) {
    constexpr std::array<std::string_view, 4> names{"pack-quantized", "int-quantized", "naive-quantized",
                                                    "float-quantized"};
    s += fmt::format(" {}", names[static_cast<size_t>(format)]);
  }
  const bool fp8 = method == quant_method::fp8 ||
                   (method == quant_method::compressed_tensors && format == ct_format::float_quantized);
  if (fp8)
    s += block_out > 0 ? fmt::format(" e4m3 {}x{} blocks", block_out, block_in) : " e4m3";
  else
    s += fmt::format(" int{} {} {}", bits, group, symmetric ? "sym" : "zero points");
  if (activations == activation_quant::int8_per_token)
    s += " W8A8 (int8 activations per token)";
  return s;
}

quantization_config parse_quantization_config(std::string_view text, std::string_view origin) {
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(text.data(), text.size()).get(root))
    throw model_error(
        fmt::format("{}: quantization_config is not valid JSON: {}", origin, simdjson::error_message(err)));
  if (root.type() != element_type::OBJECT)
    throw model_error(fmt::format("{}: quantization_config must be an object, got {}", origin, json::type_name(root)));
  const quant_fields f(json::as_object(root), origin, "quantization_config.");
  quantization_config q;
  const std::string method = f.string("quant_method").value_or("");
  if (method == "awq") {
    q.method = quant_method::awq;
    parse_awq(f, q);
  } else if (method == "gptq") {
    q.method = quant_method::gptq;
    parse_gptq(f, q);
  } else if (method == "fp8") {
    q.method = quant_method::fp8;
    parse_fp8(f, q);
  } else if (method == "compressed-tensors") {
    q.method = quant_method::compressed_tensors;
    parse_compressed_tensors(f, q);
  } else {
    f.fail("quant_method", fmt::format("is '{}', which actorllm does not load (supported: awq, gptq, fp8, "
                                       "compressed-tensors)",
                                       method));
  }
  return q;
}

quantization_config resolve_quantization(const quantization_config& found, const std::optional<std::string>& flag) {
  if (!flag)
    return found;
  std::string wanted = *flag;
  if (wanted == "awq_marlin")
    wanted = "awq";
  if (wanted == "gptq_marlin")
    wanted = "gptq";
  if (wanted == "compressed_tensors")
    wanted = "compressed-tensors";
  const bool known = wanted == "awq" || wanted == "gptq" || wanted == "fp8" || wanted == "compressed-tensors";
  if (!known)
    throw model_error(
        fmt::format("--quantization {}: not supported here (supported: awq, awq_marlin, gptq, "
                    "gptq_marlin, fp8, compressed-tensors)",
                    *flag));
  if (!found.quantized()) {
    if (wanted != "fp8")
      throw model_error(
          fmt::format("--quantization {}: the checkpoint has no quantization_config, and only fp8 "
                      "can be applied to float weights at load",
                      *flag));
    quantization_config q;
    q.method = quant_method::fp8;
    q.quantize_at_load = true;
    q.bits = 8;
    return q;
  }
  if (quant_method_name(found.method) != wanted)
    throw model_error(
        fmt::format("--quantization {}: the checkpoint is quantized with {} (its config.json's "
                    "quantization_config)",
                    *flag, quant_method_name(found.method)));
  return found;
}

}  // namespace actorllm::model
