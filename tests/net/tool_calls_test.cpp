// Tool-call formats (Hermes/Qwen, Llama 3 JSON, Mistral) parsed into calls, and the schema of tool_choice
// "required" that constrains an output so it always parses.
#include "net/openai/tool_calls.hpp"
#include "text/structured/byte_dfa.hpp"
#include "text/structured/json_schema.hpp"

#include <doctest/doctest.h>

using namespace actorllm::net::openai;

TEST_CASE("tool calls: hermes, llama3_json and mistral outputs parse into calls, plain text stays content") {
  auto h =
      parse_tool_output(tool_parser::hermes,
                        "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                        "</tool_call>\n<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>");
  REQUIRE(h.calls.size() == 2);
  CHECK(h.calls[0] == tool_call{"get_weather", R"({"city":"Paris"})"});
  CHECK(h.calls[1].name == "f");
  CHECK(h.content == "Let me look.");
  auto l = parse_tool_output(tool_parser::llama3_json, R"({"name": "add", "parameters": {"a": 1, "b": 2}})");
  REQUIRE(l.calls.size() == 1);
  CHECK(l.calls[0] == tool_call{"add", R"({"a":1,"b":2})"});
  CHECK(l.content.empty());
  auto m = parse_tool_output(tool_parser::mistral, R"([TOOL_CALLS][{"name": "f", "arguments": {"x": "y"}}])");
  REQUIRE(m.calls.size() == 1);
  CHECK(m.calls[0] == tool_call{"f", R"({"x":"y"})"});
  for (auto p : {tool_parser::hermes, tool_parser::llama3_json, tool_parser::mistral}) {
    auto plain = parse_tool_output(p, "Once upon a time {not json");
    CHECK(plain.calls.empty());
    CHECK(plain.content == "Once upon a time {not json");
  }
  auto broken = parse_tool_output(tool_parser::hermes, "<tool_call>{\"name\": oops</tool_call>");
  CHECK(broken.calls.empty());
  CHECK(parse_tool_parser_name("hermes") == tool_parser::hermes);
  CHECK_FALSE(parse_tool_parser_name("pythonic").has_value());
}

TEST_CASE("tool calls: the required schema's matches parse into calls of the listed functions") {
  const std::vector<tool_function> tools{
      {"get_weather", R"({"type":"object","properties":{"city":{"type":"string"}}})"}, {"noop", R"({"const":{}})"}};
  const auto dfa = actorllm::text::structured::byte_dfa::compile(
      actorllm::text::structured::json_schema_pattern(required_tools_schema(tools, 2)));
  const std::string out = R"([{"name":"get_weather","parameters":{"city":"Rome"}},{"name":"noop","parameters":{}}])";
  CHECK(dfa.matches(out));
  CHECK_FALSE(dfa.matches(R"([{"name":"other","parameters":{}}])"));
  CHECK_FALSE(dfa.matches("[]"));
  auto calls = parse_required_output(out);
  REQUIRE(calls.size() == 2);
  CHECK(calls[0] == tool_call{"get_weather", R"({"city":"Rome"})"});
  CHECK(calls[1] == tool_call{"noop", "{}"});
}

TEST_CASE("tool calls: Pydantic tools ($defs and $ref in their parameters) constrain tool_choice required") {
  // Two tools as Pydantic writes them, each with its own "Unit" definition: hoisted to the root under their own
  // names, so each $ref still means its tool's definition.
  const std::vector<tool_function> tools{
      {"weather", R"({"$defs":{"Unit":{"enum":["c","f"],"type":"string"}},"properties":{"city":{"type":"string"},)"
                  R"("unit":{"$ref":"#/$defs/Unit"}},"required":["city","unit"],"type":"object"})"},
      {"length", R"({"definitions":{"Unit":{"enum":["m","ft"],"type":"string"}},"properties":{"unit":)"
                 R"({"$ref":"#/definitions/Unit"}},"required":["unit"],"type":"object"})"}};
  const std::string schema = required_tools_schema(tools, 2);
  CHECK(schema.find(R"("$defs":{"tool0_Unit":)") != std::string::npos);
  const auto dfa =
      actorllm::text::structured::byte_dfa::compile(actorllm::text::structured::json_schema_pattern(schema));
  CHECK(dfa.matches(R"([{"name":"weather","parameters":{"city":"Oslo","unit":"c"}}])"));
  CHECK(dfa.matches(R"([{"name":"length","parameters":{"unit":"ft"}}])"));
  CHECK_FALSE(dfa.matches(R"([{"name":"weather","parameters":{"city":"Oslo","unit":"ft"}}])"));  // not its Unit
  CHECK_FALSE(dfa.matches(R"([{"name":"length","parameters":{"unit":"c"}}])"));
}
