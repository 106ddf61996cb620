// A JSON Schema subset validator (type, enum, required, properties, additionalProperties, items, anyOf, nullable,
// $ref into components/schemas) run against ../shared/openai/openai-schemas-subset.json, enough to check our
// responses against the official OpenAI schemas.
#pragma once

#include <simdjson.h>

#include <algorithm>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "support/test_paths.hpp"

namespace actorllm::test {

class openai_schemas {
 public:
  openai_schemas() {
    auto path = shared_dir() / "openai" / "openai-schemas-subset.json";
    simdjson::padded_string raw;
    if (simdjson::padded_string::load(path.string()).get(raw))
      throw std::runtime_error("cannot read " + path.string());
    // The seed's bounds (+-9223372036854776000, JavaScript's rounding of 2^63) overflow int64, which simdjson 3.0
    // refuses as an integer; written as floats they parse, and no schema we check uses them.
    std::string text{raw.data(), raw.size()};
    for (std::string_view big : {"-9223372036854776000", "9223372036854776000"}) {
      for (std::size_t at = text.find(big); at != std::string::npos; at = text.find(big, at + big.size() + 2)) {
        if (at > 0 && text[at - 1] == '-')
          continue;
        text.insert(at + big.size(), ".0");
      }
    }
    text_ = simdjson::padded_string(text);
    if (auto err = parser_.parse(text_).get(root_))
      throw std::runtime_error("cannot parse " + path.string() + ": " + simdjson::error_message(err));
  }

  /// Problems of `json` against components/schemas/`name`; empty when it validates.
  std::vector<std::string> check(std::string_view name, std::string_view json) {
    std::vector<std::string> errors;
    simdjson::dom::parser p;
    simdjson::dom::element doc;
    if (p.parse(simdjson::padded_string(json)).get(doc)) {
      errors.push_back("not JSON: " + std::string{json});
      return errors;
    }
    validate(schema(name), doc, "$", errors);
    return errors;
  }

  /// The property names of components/schemas/`name`, with those of the schemas it composes by allOf / $ref.
  std::vector<std::string> property_names(std::string_view name) {
    std::vector<std::string> out;
    collect_properties(schema(name), out);
    return out;
  }

 private:
  void collect_properties(simdjson::dom::element s, std::vector<std::string>& out) {
    std::string_view ref;
    if (!s["$ref"].get(ref)) {
      collect_properties(schema(ref.substr(ref.rfind('/') + 1)), out);
      return;
    }
    simdjson::dom::array all;
    if (!s["allOf"].get(all))
      for (simdjson::dom::element part : all)
        collect_properties(part, out);
    simdjson::dom::object props;
    if (!s["properties"].get(props))
      for (auto field : props)
        if (std::find(out.begin(), out.end(), field.key) == out.end())
          out.emplace_back(field.key);
  }

  simdjson::dom::element schema(std::string_view name) {
    simdjson::dom::element s;
    if (root_["components"]["schemas"][name].get(s))
      throw std::runtime_error("no schema " + std::string{name});
    return s;
  }

  static bool type_matches(std::string_view type, simdjson::dom::element v) {
    using t = simdjson::dom::element_type;
    if (type == "object")
      return v.type() == t::OBJECT;
    if (type == "array")
      return v.type() == t::ARRAY;
    if (type == "string")
      return v.type() == t::STRING;
    if (type == "integer")
      return v.type() == t::INT64 || v.type() == t::UINT64;
    if (type == "number")
      return v.type() == t::INT64 || v.type() == t::UINT64 || v.type() == t::DOUBLE;
    if (type == "boolean")
      return v.type() == t::BOOL;
    if (type == "null")
      return v.type() == t::NULL_VALUE;
    return false;
  }

  void validate(simdjson::dom::element s, simdjson::dom::element v, const std::string& at,
                std::vector<std::string>& errors) {
    bool nullable = false;  // OpenAPI 3.0: may sit beside a $ref
    if (!s["nullable"].get(nullable) && nullable && v.is_null())
      return;
    std::string_view ref;
    if (!s["$ref"].get(ref)) {
      validate(schema(ref.substr(ref.rfind('/') + 1)), v, at, errors);
      return;
    }
    simdjson::dom::array any;
    if (!s["anyOf"].get(any)) {
      bool ok = false;
      for (auto alt : any) {
        std::vector<std::string> sub;
        validate(alt, v, at, sub);
        ok = ok || sub.empty();
      }
      if (!ok)
        errors.push_back(at + ": matches no anyOf alternative");
    }
    std::string_view type;
    if (!s["type"].get(type) && !type_matches(type, v)) {
      errors.push_back(at + ": expected " + std::string{type});
      return;
    }
    simdjson::dom::array values;
    if (!s["enum"].get(values)) {
      bool found = false;
      std::string_view str;
      for (auto e : values) {
        std::string_view option;
        found = found || (!e.get(option) && !v.get(str) && option == str);
      }
      if (!found)
        errors.push_back(at + ": value not in enum");
    }
    simdjson::dom::object obj;
    if (!v.get(obj)) {
      simdjson::dom::array required;
      if (!s["required"].get(required))
        for (auto r : required) {
          std::string_view key = r.get_string().value_unsafe();
          if (obj[key].error())
            errors.push_back(at + ": missing required " + std::string{key});
        }
      simdjson::dom::object props;
      bool has_props = !s["properties"].get(props);
      simdjson::dom::element extra;
      bool has_extra = !s["additionalProperties"].get(extra) && extra.is_object();
      for (auto [key, val] : obj) {
        simdjson::dom::element ps;
        if (has_props && !props[key].get(ps))
          validate(ps, val, at + "." + std::string{key}, errors);
        else if (has_extra)
          validate(extra, val, at + "." + std::string{key}, errors);
      }
    }
    simdjson::dom::array arr;
    simdjson::dom::element items;
    if (!v.get(arr) && !s["items"].get(items)) {
      std::size_t i = 0;
      for (auto e : arr)
        validate(items, e, at + "[" + std::to_string(i++) + "]", errors);
    }
  }

  simdjson::padded_string text_;
  simdjson::dom::parser parser_;
  simdjson::dom::element root_;
};

}  // namespace actorllm::test
