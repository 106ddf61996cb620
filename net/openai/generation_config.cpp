#include "net/openai/generation_config.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <cstdint>
#include <limits>
#include <stdexcept>

namespace actorllm::net::openai {

namespace {

[[noreturn]] void bad(const std::filesystem::path& file, const std::string& why) {
  throw std::runtime_error(fmt::format("--generation-config: {}: {}", file.string(), why));
}

std::optional<double> number_field(simdjson::dom::object obj, std::string_view key, const std::filesystem::path& file) {
  simdjson::dom::element v;
  if (obj[key].get(v) != simdjson::SUCCESS || v.is_null())
    return std::nullopt;
  double d = 0;
  if (v.get_double().get(d) == simdjson::SUCCESS)
    return d;
  int64_t i = 0;
  if (v.get_int64().get(i) == simdjson::SUCCESS)
    return static_cast<double>(i);
  uint64_t u = 0;
  if (v.get_uint64().get(u) == simdjson::SUCCESS)
    return static_cast<double>(u);
  bad(file, fmt::format("'{}' must be a number", key));
}

std::optional<int32_t> int_field(simdjson::dom::object obj, std::string_view key, const std::filesystem::path& file) {
  auto d = number_field(obj, key, file);
  if (!d)
    return std::nullopt;
  if (*d != static_cast<double>(static_cast<int64_t>(*d)) || *d < std::numeric_limits<int32_t>::min() ||
      *d > std::numeric_limits<int32_t>::max())
    bad(file, fmt::format("'{}' must be an integer, got {}", key, *d));
  return static_cast<int32_t>(*d);
}

}  // namespace

sampling_defaults read_generation_config(const std::filesystem::path& file) {
  simdjson::dom::parser parser;
  simdjson::padded_string text;
  if (simdjson::padded_string::load(file.string()).get(text) != simdjson::SUCCESS)
    bad(file, "cannot read the file");
  simdjson::dom::element root;
  if (auto err = parser.parse(text).get(root); err != simdjson::SUCCESS)
    bad(file, fmt::format("invalid JSON: {}", simdjson::error_message(err)));
  simdjson::dom::object obj;
  if (root.get(obj) != simdjson::SUCCESS)
    bad(file, "must hold a JSON object");
  sampling_defaults d;
  if (auto v = number_field(obj, "temperature", file))
    d.temperature = static_cast<float>(*v);
  if (auto v = number_field(obj, "top_p", file))
    d.top_p = static_cast<float>(*v);
  d.top_k = int_field(obj, "top_k", file);
  if (auto v = number_field(obj, "min_p", file))
    d.min_p = static_cast<float>(*v);
  if (auto v = number_field(obj, "repetition_penalty", file))
    d.repetition_penalty = static_cast<float>(*v);
  d.max_tokens = int_field(obj, "max_new_tokens", file);
  // A default that no request could pass is a broken file, better refused now than on every request.
  sampling_params p;
  p.temperature = d.temperature.value_or(p.temperature);
  p.top_p = d.top_p.value_or(p.top_p);
  p.top_k = d.top_k.value_or(p.top_k);
  p.min_p = d.min_p.value_or(p.min_p);
  p.repetition_penalty = d.repetition_penalty.value_or(p.repetition_penalty);
  if (d.max_tokens)
    p.max_tokens = d.max_tokens;
  if (std::string problem = validate(p); !problem.empty())
    bad(file, problem);
  return d;
}

sampling_defaults resolve_generation_config(std::string_view setting, const std::filesystem::path& model_dir) {
  if (setting == "vllm")
    return {};
  if (setting == "auto" || setting.empty()) {
    const auto file = model_dir / "generation_config.json";
    if (!std::filesystem::exists(file))
      return {};
    return read_generation_config(file);
  }
  const std::filesystem::path dir{setting};
  const auto file = dir / "generation_config.json";
  if (!std::filesystem::is_regular_file(file))
    throw std::runtime_error(
        fmt::format("--generation-config: {} does not exist (give 'auto', 'vllm', or a directory holding a "
                    "generation_config.json)",
                    file.string()));
  return read_generation_config(file);
}

std::string describe(const sampling_defaults& d) {
  std::string out;
  auto add = [&out](std::string_view name, const auto& v) {
    if (!v)
      return;
    out += fmt::format("{}{}={}", out.empty() ? "" : ", ", name, *v);
  };
  add("temperature", d.temperature);
  add("top_p", d.top_p);
  add("top_k", d.top_k);
  add("min_p", d.min_p);
  add("repetition_penalty", d.repetition_penalty);
  add("max_tokens", d.max_tokens);
  return out;
}

}  // namespace actorllm::net::openai
