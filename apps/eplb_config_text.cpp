// --eplb-config's JSON object read key by key: see eplb_config_text.hpp.
#include "apps/eplb_config_text.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <limits>

namespace actorllm::app {

std::string set_eplb_key(eplb_config& out, std::string_view key, bool is_bool, int64_t number) {
  auto integer = [&](int32_t& field, int64_t min) -> std::string {
    if (is_bool)
      return fmt::format("{} must be an integer, got a boolean", key);
    if (number < min || number > std::numeric_limits<int32_t>::max())
      return fmt::format("{} must be at least {}, got {}", key, min, number);
    field = static_cast<int32_t>(number);
    return {};
  };
  if (key == "window_size")
    return integer(out.window_size, 1);
  if (key == "step_interval")
    return integer(out.step_interval, 1);
  if (key == "num_redundant_experts")
    return integer(out.num_redundant_experts, 0);
  if (key == "log_balancedness") {
    if (!is_bool)
      return fmt::format("{} must be true or false", key);
    out.log_balancedness = number != 0;
    return {};
  }
  return fmt::format("unknown key '{}' (known: {})", key, eplb_config_keys);
}

std::string parse_eplb_config(std::string_view text, eplb_config& out) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(text.data(), text.size()).get(doc) != simdjson::SUCCESS)
    return fmt::format("'{}' is not JSON (expected an object like {{\"num_redundant_experts\": 4}})", text);
  simdjson::dom::object object;
  if (doc.get_object().get(object) != simdjson::SUCCESS)
    return fmt::format("'{}' is not a JSON object", text);
  eplb_config next = out;
  for (auto [key, value] : object) {
    bool is_bool = false;
    int64_t number = 0;
    if (value.is_bool()) {
      is_bool = true;
      number = value.get_bool().value_unsafe() ? 1 : 0;
    } else if (value.is_int64()) {
      number = value.get_int64().value_unsafe();
    } else if (key == "window_size" || key == "step_interval" || key == "num_redundant_experts" ||
               key == "log_balancedness") {
      return fmt::format("{} must be {}, got {}", key, key == "log_balancedness" ? "true or false" : "an integer",
                         simdjson::to_string(value));
    }
    if (std::string why = set_eplb_key(next, key, is_bool, number); !why.empty())
      return why;
  }
  out = next;
  return {};
}

}  // namespace actorllm::app
