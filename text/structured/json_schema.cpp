// JSON schema -> pattern, one keyword at a time; a keyword that is not handled is refused by name.
#include "text/structured/json_schema.hpp"

#include "text/structured/byte_dfa.hpp"

#include <simdjson.h>

#include <algorithm>
#include <set>

namespace actorllm::text::structured {

namespace {

namespace dom = simdjson::dom;

constexpr int string_cap = 32;
constexpr int array_cap = 6;
const std::string string_char = R"((?:[ !#-\[\]-~]|\\["\\/bfnrt]))";
const std::string integer_digits = "(?:0|[1-9][0-9]{0,9})";
const std::string fraction = R"((?:\.[0-9]{1,6})?(?:[eE][+-]?[0-9]{1,2})?)";

std::string string_of(int lo, int hi) {
  return "\"" + string_char + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}\"";
}

const std::set<std::string_view> annotations{
    "title",    "description", "default",    "examples", "$schema",     "$id",      "$comment",
    "readOnly", "writeOnly",   "deprecated", "$defs",    "definitions", "required", "additionalProperties",
    "strict",   "name"};

// The pattern grows while it is generated: every piece is checked against the limit as soon as it is built, so a
// schema that expands ($ref used many times, nested anyOf, nested arrays repeating their items) is refused before
// the next level copies it again (a piece is at most a few times the limit when it is checked).
class converter {
 public:
  converter(dom::element root, const structured_limits& limits) : root_(root), limits_(limits) {}

  std::string value(dom::element s, const std::string& where, std::size_t depth) {
    if (depth > limits_.max_depth)
      throw schema_error(where, "the schema nests deeper than --max-structured-output-depth (" +
                                    std::to_string(limits_.max_depth) +
                                    ") levels or has a recursive $ref, which is not supported");
    return bounded(value_of(s, where, depth), where);
  }

  std::string value_of(dom::element s, const std::string& where, std::size_t depth) {
    bool b = false;
    if (s.get(b) == simdjson::SUCCESS) {
      if (!b)
        throw schema_error(where, "the schema `false` allows nothing");
      return any_value(2);
    }
    dom::object obj;
    if (s.get(obj))
      throw schema_error(where, "a schema must be an object or a boolean");
    std::string_view ref;
    if (obj["$ref"].get(ref) == simdjson::SUCCESS)
      return value(resolve(ref, where), where + "/$ref", depth + 1);
    for (auto kv : obj) {
      const std::string_view k = kv.key;
      if (annotations.contains(k) || k == "type" || k == "properties" || k == "items" || k == "minItems" ||
          k == "maxItems" || k == "enum" || k == "const" || k == "anyOf" || k == "oneOf" || k == "allOf" ||
          k == "minLength" || k == "maxLength" || k == "pattern" || k == "minimum")
        continue;
      throw schema_error(where + "/" + std::string{k}, "the JSON schema keyword `" + std::string{k} +
                                                           "` is not supported by structured outputs here");
    }
    dom::element e;
    if (obj["const"].get(e) == simdjson::SUCCESS)
      return regex_escape(simdjson::minify(e));
    if (obj["enum"].get(e) == simdjson::SUCCESS) {
      dom::array values;
      if (e.get(values) || values.size() == 0)
        throw schema_error(where + "/enum", "enum must be a non-empty array");
      std::string out = "(?:";
      bool first = true;
      for (dom::element v : values) {
        if (!first)
          out += '|';
        out += regex_escape(simdjson::minify(v));
        first = false;
      }
      return out + ")";
    }
    for (const char* combiner : {"anyOf", "oneOf"}) {
      if (obj[combiner].get(e) == simdjson::SUCCESS) {
        dom::array options;
        if (e.get(options) || options.size() == 0)
          throw schema_error(where + "/" + combiner, std::string{combiner} + " must be a non-empty array");
        std::string out = "(?:";
        std::size_t i = 0;
        for (dom::element o : options) {
          if (i > 0)
            out += '|';
          out += value(o, where + "/" + combiner + "/" + std::to_string(i), depth + 1);
          out = bounded(std::move(out), where + "/" + combiner);
          ++i;
        }
        return out + ")";
      }
    }
    if (obj["allOf"].get(e) == simdjson::SUCCESS) {
      dom::array parts;
      if (e.get(parts) || parts.size() != 1)
        throw schema_error(where + "/allOf", "allOf of more than one schema is not supported");
      return value(parts.at(0).value_unsafe(), where + "/allOf/0", depth + 1);
    }
    dom::element type;
    if (obj["type"].get(type) == simdjson::SUCCESS) {
      dom::array types;
      if (type.get(types) == simdjson::SUCCESS) {
        std::string out = "(?:";
        bool first = true;
        for (dom::element t : types) {
          if (!first)
            out += '|';
          out += typed(obj, t, where, depth);
          out = bounded(std::move(out), where + "/type");
          first = false;
        }
        return out + ")";
      }
      return typed(obj, type, where, depth);
    }
    if (obj["properties"].error() == simdjson::SUCCESS)
      return object(obj, where, depth);
    if (obj["items"].error() == simdjson::SUCCESS)
      return array(obj, where, depth);
    return any_value(2);
  }

  static std::string any_value(int depth) {
    std::string scalar = "(?:" + string_of(0, string_cap) + "|-?" + integer_digits + fraction + "|true|false|null)";
    if (depth == 0)
      return scalar;
    const std::string inner = any_value(depth - 1);
    const std::string obj = any_object(inner);
    const std::string arr = R"(\[(?:)" + inner + "(?:," + inner + "){0," + std::to_string(array_cap - 1) + R"(})?\])";
    return "(?:" + scalar + "|" + obj + "|" + arr + ")";
  }

  static std::string any_object(const std::string& v) {
    const std::string member = string_of(1, 16) + ":" + v;
    return R"(\{(?:)" + member + "(?:," + member + "){0,3})?\\}";
  }

 private:
  std::string bounded(std::string piece, const std::string& where) const {
    if (piece.size() > limits_.pattern_bytes())
      throw schema_error(where, "the pattern the schema generates passes " + std::to_string(limits_.pattern_bytes()) +
                                    " bytes (16 x --max-structured-output-bytes); $ref, anyOf and arrays copy their "
                                    "subschemas");
    return piece;
  }

  dom::element resolve(std::string_view ref, const std::string& where) {
    for (std::string_view prefix : {"#/$defs/", "#/definitions/"}) {
      if (ref.starts_with(prefix)) {
        dom::element target;
        if (root_[prefix == "#/$defs/" ? "$defs" : "definitions"][ref.substr(prefix.size())].get(target) ==
            simdjson::SUCCESS)
          return target;
        throw schema_error(where + "/$ref", "$ref " + std::string{ref} + " names no definition");
      }
    }
    if (ref == "#")
      return root_;
    throw schema_error(where + "/$ref", "$ref " + std::string{ref} + " is not supported (only #/$defs/... )");
  }

  int64_t int_keyword(dom::object obj, const char* key, const std::string& where, int64_t fallback) {
    dom::element e;
    if (obj[key].get(e))
      return fallback;
    int64_t v = 0;
    if (e.get(v) || v < 0)
      throw schema_error(where + "/" + key, std::string{key} + " must be a non-negative integer");
    return v;
  }

  bool non_negative(dom::object obj, const std::string& where) {
    dom::element e;
    if (obj["minimum"].get(e))
      return false;
    double m = 0;
    if (e.is_int64())
      m = static_cast<double>(e.get_int64().value_unsafe());
    else if (e.get(m))
      throw schema_error(where + "/minimum", "minimum must be a number");
    if (m != 0)
      throw schema_error(where + "/minimum", "minimum other than 0 is not supported by structured outputs here");
    return true;
  }

  std::string typed(dom::object obj, dom::element type_v, const std::string& where, std::size_t depth) {
    std::string_view type;
    if (type_v.get(type))
      throw schema_error(where + "/type", "type must be a string or a list of strings");
    if (type == "string") {
      std::string_view pattern;
      if (obj["pattern"].get(pattern) == simdjson::SUCCESS) {
        std::string p{pattern};
        if (p.starts_with('^'))
          p.erase(0, 1);
        if (p.ends_with('$') && !p.ends_with("\\$"))
          p.pop_back();
        try {
          byte_dfa::check_syntax(p, limits_);  // the whole pattern is compiled, under the limits, once at the end
        } catch (const regex_error& e) {
          throw schema_error(where + "/pattern", e.what());
        }
        return "\"(?:" + p + ")\"";
      }
      const int64_t lo = int_keyword(obj, "minLength", where, 0);
      const int64_t hi = int_keyword(obj, "maxLength", where, std::max<int64_t>(lo, string_cap));
      if (hi < lo || hi > 1000)
        throw schema_error(where + "/maxLength", "maxLength must be in [minLength, 1000]");
      return string_of(static_cast<int>(lo), static_cast<int>(hi));
    }
    if (type == "integer")
      return (non_negative(obj, where) ? "" : "-?") + integer_digits;
    if (type == "number")
      return (non_negative(obj, where) ? "" : "-?") + integer_digits + fraction;
    if (type == "boolean")
      return "(?:true|false)";
    if (type == "null")
      return "null";
    if (type == "object")
      return object(obj, where, depth);
    if (type == "array")
      return array(obj, where, depth);
    throw schema_error(where + "/type", "unknown type '" + std::string{type} + "'");
  }

  std::string object(dom::object obj, const std::string& where, std::size_t depth) {
    dom::object props;
    if (obj["properties"].get(props) || props.size() == 0)
      return any_object(any_value(1));
    std::string out = R"(\{)";
    bool first = true;
    for (auto kv : props) {
      const std::string key{kv.key};
      if (!first)
        out += ',';
      out += regex_escape("\"" + key + "\"");
      out += ':';
      out += value(kv.value, where + "/properties/" + key, depth + 1);
      out = bounded(std::move(out), where + "/properties");
      first = false;
    }
    return out + R"(\})";
  }

  std::string array(dom::object obj, const std::string& where, std::size_t depth) {
    dom::element items;
    std::string item =
        obj["items"].get(items) == simdjson::SUCCESS ? value(items, where + "/items", depth + 1) : any_value(1);
    const int64_t lo = int_keyword(obj, "minItems", where, 0);
    const int64_t hi = int_keyword(obj, "maxItems", where, std::max<int64_t>(lo, array_cap));
    if (hi < lo || hi > 100)
      throw schema_error(where + "/maxItems", "maxItems must be in [minItems, 100]");
    if (hi == 0)
      return R"(\[\])";
    std::string rest =
        "(?:," + item + "){" + std::to_string(std::max<int64_t>(lo - 1, 0)) + "," + std::to_string(hi - 1) + "}";
    if (lo == 0)
      return R"(\[(?:)" + item + rest + R"()?\])";
    return R"(\[)" + item + rest + R"(\])";
  }

  dom::element root_;
  const structured_limits& limits_;
};

}  // namespace

std::string json_schema_pattern(std::string_view schema_json, const structured_limits& limits) {
  if (schema_json.size() > limits.max_bytes)
    throw schema_error("#", "the schema is " + std::to_string(schema_json.size()) +
                                " bytes, more than --max-structured-output-bytes (" + std::to_string(limits.max_bytes) +
                                ")");
  dom::parser parser;
  dom::element root;
  const simdjson::padded_string padded{schema_json};
  if (auto err = parser.parse(padded).get(root))
    throw schema_error("#", std::string{"the schema is not valid JSON: "} + simdjson::error_message(err));
  converter c{root, limits};
  return c.value(root, "#", 0);
}

std::string json_object_pattern() {
  // Objects whose values nest two levels deep.
  return converter::any_object("(?:" + std::string{} + converter::any_value(1) + ")");
}

std::string choice_pattern(const std::vector<std::string>& choices, const structured_limits& limits) {
  if (choices.empty())
    throw schema_error("choice", "the choice list must not be empty");
  std::size_t bytes = 0;
  for (const std::string& c : choices)
    bytes += c.size() + 1;
  if (bytes > limits.max_bytes)
    throw schema_error("choice", "the choices hold " + std::to_string(bytes) +
                                     " bytes, more than --max-structured-output-bytes (" +
                                     std::to_string(limits.max_bytes) + ")");
  std::string out = "(?:";
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (i > 0)
      out += '|';
    out += regex_escape(choices[i]);
  }
  return out + ")";
}

}  // namespace actorllm::text::structured
