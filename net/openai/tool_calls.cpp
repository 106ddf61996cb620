// Tool-call formats: parsing with simdjson, each call's arguments kept as minified JSON text.
#include "net/openai/tool_calls.hpp"

#include "util/json_writer.hpp"

#include <simdjson.h>

#include <utility>
#include <vector>

namespace actorllm::net::openai {

namespace {

namespace dom = simdjson::dom;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// {"name": ..., "arguments"|"parameters": ...} as a call; nothing when it is not one.
std::optional<tool_call> call_of(dom::element e) {
  dom::object obj;
  if (e.get(obj))
    return std::nullopt;
  std::string_view name;
  if (obj["name"].get(name))
    return std::nullopt;
  dom::element args;
  tool_call c;
  c.name = std::string{name};
  if (obj["arguments"].get(args) == simdjson::SUCCESS || obj["parameters"].get(args) == simdjson::SUCCESS) {
    std::string_view as_text;
    c.arguments = args.get(as_text) == simdjson::SUCCESS ? std::string{as_text} : simdjson::minify(args);
  } else {
    c.arguments = "{}";
  }
  return c;
}

// The calls of a JSON text holding one call or an array of them.
std::optional<std::vector<tool_call>> calls_of(std::string_view json) {
  dom::parser parser;
  dom::element root;
  const simdjson::padded_string padded{trim(json)};
  if (parser.parse(padded).get(root))
    return std::nullopt;
  std::vector<tool_call> out;
  dom::array list;
  if (root.get(list) == simdjson::SUCCESS) {
    for (dom::element e : list) {
      auto c = call_of(e);
      if (!c)
        return std::nullopt;
      out.push_back(std::move(*c));
    }
    return out;
  }
  auto c = call_of(root);
  if (!c)
    return std::nullopt;
  out.push_back(std::move(*c));
  return out;
}

}  // namespace

std::optional<tool_parser> parse_tool_parser_name(std::string_view name) {
  if (name == "hermes")
    return tool_parser::hermes;
  if (name == "llama3_json")
    return tool_parser::llama3_json;
  if (name == "mistral")
    return tool_parser::mistral;
  return std::nullopt;
}

parsed_tool_output parse_tool_output(tool_parser format, std::string_view text) {
  parsed_tool_output out;
  switch (format) {
    case tool_parser::hermes: {
      static constexpr std::string_view open = "<tool_call>", close = "</tool_call>";
      const auto first = text.find(open);
      if (first == std::string_view::npos) {
        out.content = std::string{text};
        return out;
      }
      for (auto at = first; at != std::string_view::npos; at = text.find(open, at)) {
        const auto body = at + open.size();
        auto end = text.find(close, body);
        auto calls = calls_of(text.substr(body, end == std::string_view::npos ? std::string_view::npos : end - body));
        if (!calls) {  // a broken call: the whole output is content, as vLLM's parser falls back
          out.calls.clear();
          out.content = std::string{text};
          return out;
        }
        for (auto& c : *calls)
          out.calls.push_back(std::move(c));
        at = end == std::string_view::npos ? std::string_view::npos : end + close.size();
      }
      out.content = std::string{trim(text.substr(0, first))};
      return out;
    }
    case tool_parser::llama3_json: {
      std::string_view t = trim(text);
      if (t.starts_with("<|python_tag|>"))
        t = trim(t.substr(14));
      if (!t.starts_with('{')) {
        out.content = std::string{text};
        return out;
      }
      // One call, or several separated by ';'.
      std::size_t start = 0;
      while (start < t.size()) {
        auto semi = t.find(';', start);
        auto calls = calls_of(t.substr(start, semi == std::string_view::npos ? std::string_view::npos : semi - start));
        if (!calls) {
          out.calls.clear();
          out.content = std::string{text};
          return out;
        }
        for (auto& c : *calls)
          out.calls.push_back(std::move(c));
        if (semi == std::string_view::npos)
          break;
        start = semi + 1;
      }
      return out;
    }
    case tool_parser::mistral: {
      static constexpr std::string_view tag = "[TOOL_CALLS]";
      const auto at = text.find(tag);
      if (at == std::string_view::npos) {
        out.content = std::string{text};
        return out;
      }
      auto calls = calls_of(text.substr(at + tag.size()));
      if (!calls) {
        out.content = std::string{text};
        return out;
      }
      out.calls = std::move(*calls);
      out.content = std::string{trim(text.substr(0, at))};
      return out;
    }
  }
  out.content = std::string{text};
  return out;
}

std::size_t streamable_prefix(tool_parser format, std::string_view text) {
  std::string_view marker;
  switch (format) {
    case tool_parser::hermes:
      marker = "<tool_call>";
      break;
    case tool_parser::mistral:
      marker = "[TOOL_CALLS]";
      break;
    case tool_parser::llama3_json: {
      const std::string_view t = trim(text);
      if (t.empty() || t.front() == '{' || std::string_view{"<|python_tag|>"}.starts_with(t.substr(0, 14)))
        return 0;
      return text.size();
    }
  }
  if (auto at = text.find(marker); at != std::string_view::npos)
    return at;
  // Keep back the longest tail that is a start of the marker.
  for (std::size_t keep = std::min(marker.size() - 1, text.size()); keep > 0; --keep)
    if (marker.starts_with(text.substr(text.size() - keep)))
      return text.size() - keep;
  return text.size();
}

namespace {

// Writes schema `e` with its references to local definitions ("#/$defs/N", "#/definitions/N") renamed to
// "#/$defs/<prefix>N"; at the top the definitions themselves are left out (the caller hoists them).
void write_renamed(json_writer& w, dom::element e, const std::string& prefix, bool top) {
  dom::object obj;
  dom::array arr;
  if (e.get(obj) == simdjson::SUCCESS) {
    w.begin_object();
    for (dom::key_value_pair kv : obj) {
      if (top && (kv.key == "$defs" || kv.key == "definitions"))
        continue;
      w.key(kv.key);
      std::string_view ref;
      if (kv.key == "$ref" && kv.value.get(ref) == simdjson::SUCCESS) {
        std::string renamed{ref};
        for (std::string_view local : {"#/$defs/", "#/definitions/"})
          if (ref.starts_with(local))
            renamed = "#/$defs/" + prefix + std::string{ref.substr(local.size())};
        w.value(renamed);
      } else {
        write_renamed(w, kv.value, prefix, false);
      }
    }
    w.end_object();
  } else if (e.get(arr) == simdjson::SUCCESS) {
    w.begin_array();
    for (dom::element item : arr)
      write_renamed(w, item, prefix, false);
    w.end_array();
  } else {
    w.raw(simdjson::minify(e));
  }
}

// A tool's parameters as part of a larger schema: its local definitions ($defs or definitions, as Pydantic writes
// them) move to the root under "tool<i>_" names, and its references follow them.
std::string hoisted_parameters(const std::string& parameters_json, std::size_t i,
                               std::vector<std::pair<std::string, std::string>>& root_defs) {
  dom::parser parser;
  dom::element root;
  if (parser.parse(parameters_json).get(root) != simdjson::SUCCESS)
    return parameters_json;
  const std::string prefix = "tool" + std::to_string(i) + "_";
  for (std::string_view section : {"$defs", "definitions"}) {
    dom::object defs;
    if (root[section].get(defs) != simdjson::SUCCESS)
      continue;
    for (dom::key_value_pair kv : defs) {
      json_writer w;
      write_renamed(w, kv.value, prefix, false);
      root_defs.emplace_back(prefix + std::string{kv.key}, w.take());
    }
  }
  json_writer w;
  write_renamed(w, root, prefix, true);
  return w.take();
}

}  // namespace

std::string required_tools_schema(const std::vector<tool_function>& tools, int max_calls) {
  std::string any_of;
  std::vector<std::pair<std::string, std::string>> defs;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const tool_function& t = tools[i];
    if (!any_of.empty())
      any_of += ',';
    std::string name_json = "\"";
    for (char c : t.name) {
      if (c == '"' || c == '\\')
        name_json += '\\';
      name_json += c;
    }
    name_json += '"';
    any_of += R"({"type":"object","properties":{"name":{"const":)" + name_json + R"(},"parameters":)" +
              hoisted_parameters(t.parameters_json, i, defs) + R"(},"required":["name","parameters"]})";
  }
  std::string schema = R"({"type":"array","minItems":1,"maxItems":)" + std::to_string(max_calls) +
                       R"(,"items":{"anyOf":[)" + any_of + "]}";
  if (!defs.empty()) {
    json_writer w;
    w.begin_object();
    for (const auto& [name, body] : defs)
      w.key(name).raw(body);
    w.end_object();
    schema += R"(,"$defs":)" + w.take();
  }
  return schema + "}";
}

std::vector<tool_call> parse_required_output(std::string_view text) {
  auto calls = calls_of(text);
  return calls ? *calls : std::vector<tool_call>{};
}

}  // namespace actorllm::net::openai
