// The one place that says what the server does with each request field of /v1/completions and
// /v1/chat/completions: every field of OpenAI's request schemas and of vLLM's extra parameters is listed here as
// implemented, accepted only at the values it can honour, informational, or refused. The request parser reads a
// field only through this table, so no listed field can be dropped without a word: a refused field (or a refused
// value) is a 400 whose `param` names it. Fields in neither schema are ignored, as vLLM ignores them, and
// reported back so that the server can log them.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace actorllm::net::openai {

/// The request bodies a field belongs to (a bit set).
enum class endpoint : uint8_t {
  completions = 1,  ///< /v1/completions
  chat = 2,         ///< /v1/chat/completions
};

/// What the server does with a field.
enum class field_support : uint8_t {
  implemented,    ///< read, validated and acted on
  restricted,     ///< accepted at the values that ask for nothing missing; other values are a 400 naming it
  informational,  ///< read and validated; by its definition it does not change what is generated
  refused,        ///< any non-null value is a 400 naming it
};

/// One row of the table.
struct field_rule {
  std::string_view name;
  uint8_t endpoints = 0;  ///< endpoint bits
  field_support support = field_support::refused;
  /// implemented/informational: what it does; restricted: the accepted values; refused: why it is not supported.
  std::string_view note;
  bool vllm_extra = false;  ///< a vLLM extension rather than a field of OpenAI's schema
};

/// Every known request field, both endpoints.
std::span<const field_rule> request_fields();

/// The rule for `name` on endpoint `e`, or nullptr when the field is not one of that endpoint's.
const field_rule* find_request_field(endpoint e, std::string_view name);

/// "completions" or "chat".
std::string_view endpoint_name(endpoint e);

}  // namespace actorllm::net::openai
