// JSON in and out of template values. In: request bodies (messages, tools) parsed with simdjson. Out: the
// `tojson` filter, which in Hugging Face's renderer is Python's json.dumps(x, ensure_ascii=False, ...), so the
// bytes (", " and ": " separators, float spelling, escapes) must match Python's.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "text/jinja/value.hpp"

namespace simdjson::dom {
class element;
}  // namespace simdjson::dom

namespace actorllm::text::jinja {

/// Options of json.dumps that HF's tojson filter passes through.
struct json_dump_options {
  /// Indent string per level; absent writes everything on one line (json.dumps(indent=None)).
  std::optional<std::string> indent;
  /// Separators; absent means Python's defaults: ", " (or "," with an indent) and ": ".
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
  /// Escape every non-ASCII character as \uXXXX (HF passes false).
  bool ensure_ascii = false;
};

/// json.dumps(v, ...). Throws value_error for values JSON cannot hold (Undefined, namespace, callables, keys of
/// other types than str/int/float/bool/None) and for nesting deeper than 256 levels.
std::string to_json(const value& v, const json_dump_options& options = {});

/// Parses a JSON document into values (objects keep their key order; integers that fit int64 stay integers).
/// Throws std::invalid_argument with simdjson's message for invalid JSON.
value parse_json(std::string_view json);

/// Converts an already parsed simdjson element.
value from_json(const simdjson::dom::element& element);

}  // namespace actorllm::text::jinja
