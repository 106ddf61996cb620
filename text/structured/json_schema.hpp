// Structured-output constraints as patterns for byte_dfa: a JSON schema (response_format json_schema, vLLM's
// structured_outputs.json / guided_json), any JSON object (response_format json_object), and a choice among strings.
//
// The JSON written is compact (no whitespace) with object properties in the schema's order, every listed property
// present (so required ones always are). To make every generation end, unbounded sizes get caps: strings 32
// characters unless maxLength says otherwise, arrays 6 items unless maxItems, integers 10 digits, fractions 6
// digits. Supported keywords: type (one or a list), properties, required, items, minItems, maxItems, enum, const,
// anyOf, oneOf, allOf of one schema, $ref into $defs / definitions (not recursive), string minLength, maxLength
// and pattern (byte_dfa's syntax), integer/number minimum 0 (no minus sign), additionalProperties (nothing extra is
// ever written), and annotations (title, description, default, examples, ...). Anything else is refused with a
// schema_error naming the keyword and where it is.
//
// Bounded by structured_limits: the schema's text (max_bytes), its nesting (max_depth, $ref hops included) and the
// pattern it generates (pattern_bytes(), checked as each piece is built, so an exponential schema fails early).
#pragma once

#include "text/structured/structured_limits.hpp"

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::text::structured {

/// A schema this engine cannot constrain to. what() names the keyword and its location in the schema.
class schema_error : public std::runtime_error {
 public:
  schema_error(std::string where, const std::string& message)
      : std::runtime_error(message + " (at " + where + ")"), where_(std::move(where)) {}
  /// Where in the schema: "#/properties/name/format".
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

/// The pattern of JSON texts valid against `schema_json`. Throws schema_error (also when the schema passes one of
/// `limits`; the message names the limit and its `serve` flag).
std::string json_schema_pattern(std::string_view schema_json, const structured_limits& limits = {});

/// The pattern of JSON objects (any keys, values nested up to two levels, sizes capped as above).
std::string json_object_pattern();

/// The pattern matching exactly one of `choices` (non-empty, at most `limits.max_bytes` together). Throws
/// schema_error.
std::string choice_pattern(const std::vector<std::string>& choices, const structured_limits& limits = {});

}  // namespace actorllm::text::structured
