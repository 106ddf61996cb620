// Tool calling for chat: the output formats models write tool calls in (vLLM's --tool-call-parser: hermes, the
// Hermes/Qwen `<tool_call>{json}</tool_call>`; llama3_json, Llama 3's bare `{"name": ..., "parameters": ...}`;
// mistral, `[TOOL_CALLS][{...}]`), parsed into calls; and, for tool_choice "required" or a named function, the
// JSON schema that structured outputs constrain the output to, so that it always parses (vLLM's way: an array of
// {name, parameters} for required, the function's parameters for a named one).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::net::openai {

/// One function of a request's `tools`.
struct tool_function {
  std::string name;
  /// Its JSON schema, minified; a function given without parameters takes none: `{"const":{}}` (arguments `{}`).
  std::string parameters_json = R"({"const":{}})";

  friend bool operator==(const tool_function&, const tool_function&) = default;
};

/// A parsed call: the function's name and its arguments as a JSON text.
struct tool_call {
  std::string name;
  std::string arguments;

  friend bool operator==(const tool_call&, const tool_call&) = default;
};

/// --tool-call-parser.
enum class tool_parser { hermes, llama3_json, mistral };

/// The parser named `name` (hermes, llama3_json, mistral); nothing for another name.
std::optional<tool_parser> parse_tool_parser_name(std::string_view name);

/// The text around the calls and the calls of a model's output in `format`. An output without a (parsable) call
/// is all content.
struct parsed_tool_output {
  std::string content;
  std::vector<tool_call> calls;
};
parsed_tool_output parse_tool_output(tool_parser format, std::string_view text);

/// How much of `text` (a choice's output so far) can be streamed as content before a call may start in `format`:
/// everything before the call's marker (`<tool_call>`, `[TOOL_CALLS]`; a Llama 3 call is the whole output, so
/// nothing once it starts with `{`), keeping back a tail that could be the start of the marker.
std::size_t streamable_prefix(tool_parser format, std::string_view text);

/// tool_choice "required": the schema of `[{"name": one of the tools, "parameters": its schema}, ...]`, at most
/// `max_calls` entries.
std::string required_tools_schema(const std::vector<tool_function>& tools, int max_calls);

/// The calls of an output constrained by required_tools_schema (empty when it does not parse).
std::vector<tool_call> parse_required_output(std::string_view text);

}  // namespace actorllm::net::openai
