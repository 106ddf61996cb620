// Tool calling end to end on stories260K: with tool_choice "required" or a named function the output is constrained
// to the calls' JSON, so every reply has parsable tool_calls, streamed and not; "auto" needs the vLLM flags; a
// history with tool_calls and tool results renders through the template.
#include "server_harness.hpp"

#include <map>
#include <set>
#include <string>

using namespace actorllm::e2e;

namespace {

/// `s` as a JSON string literal (the arguments gathered from stream deltas contain no control characters).
std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

const std::string tools =
    R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
    R"("properties":{"city":{"type":"string","maxLength":10},"days":{"type":"integer","minimum":0}},)"
    R"("required":["city","days"]}}},{"type":"function","function":{"name":"noop"}}])";

void check_calls(simdjson::dom::element calls, const std::string& only) {
  REQUIRE(calls.is_array());
  REQUIRE(calls.get_array().size() >= 1);
  for (simdjson::dom::element c : calls.get_array()) {
    CHECK(std::string_view(c["type"]) == "function");
    CHECK(std::string_view(c["id"]).starts_with("chatcmpl-tool-"));
    const std::string name{std::string_view(c["function"]["name"])};
    CHECK((name == "get_weather" || name == "noop"));
    if (!only.empty())
      CHECK(name == only);
    simdjson::dom::parser p;
    simdjson::dom::element args;
    REQUIRE_MESSAGE(p.parse(std::string{std::string_view(c["function"]["arguments"])}).get(args) == simdjson::SUCCESS,
                    std::string_view(c["function"]["arguments"]));
    CHECK(args.is_object());
    if (name == "get_weather") {
      CHECK(args["city"].is_string());
      CHECK(args["days"].is_int64());
    }
  }
}

}  // namespace

TEST_CASE("tool calls: required and named functions always parse, streamed and not") {
  server s;
  for (const std::string choice : {R"("required")", R"({"type":"function","function":{"name":"get_weather"}})"}) {
    CAPTURE(choice);
    const std::string only = choice.starts_with("{") ? "get_weather" : "";
    const std::string body = R"({"messages":[{"role":"user","content":"Weather in Paris?"}],"temperature":1,"n":3,)"
                             R"("max_tokens":450,"seed":7,"tools":)" +
                             tools + R"(,"tool_choice":)" + choice;
    auto r = http(s.port(), "POST", "/v1/chat/completions", body + "}");
    REQUIRE_MESSAGE(r.status == 200, r.body);
    simdjson::dom::parser p;
    simdjson::dom::element doc = p.parse(r.body);
    for (simdjson::dom::element c : doc["choices"].get_array()) {
      CHECK(std::string_view(c["finish_reason"]) == "tool_calls");
      CHECK(std::string_view(c["message"]["content"]) == "");  // vLLM: "" beside a forced call, not null
      check_calls(c["message"]["tool_calls"], only);
    }
    auto st = http(s.port(), "POST", "/v1/chat/completions", body + R"(,"stream":true})");
    REQUIRE(st.status == 200);
    // The deltas' calls, gathered per choice and call index as clients do (a named function's arguments stream in
    // pieces; required calls come whole), then checked as whole calls.
    std::map<std::pair<int64_t, int64_t>, std::pair<std::string, std::string>> gathered;  // -> (name, arguments)
    std::map<int64_t, std::string> finishes;
    for (std::size_t at = st.body.find("data: {"); at != std::string::npos; at = st.body.find("data: {", at + 1)) {
      simdjson::dom::parser pe;
      simdjson::dom::element e = pe.parse(st.body.substr(at + 6, st.body.find("\n\n", at) - at - 6));
      simdjson::dom::array choices = e["choices"];
      if (choices.size() == 0)
        continue;
      const int64_t index = choices.at(0)["index"];
      std::string_view finish;
      if (choices.at(0)["finish_reason"].get(finish) == simdjson::SUCCESS)
        finishes[index] = std::string{finish};
      simdjson::dom::array calls;
      if (choices.at(0)["delta"]["tool_calls"].get(calls) != simdjson::SUCCESS)
        continue;
      for (simdjson::dom::element c : calls) {
        auto& [name, args] = gathered[{index, int64_t(c["index"])}];
        std::string_view piece;
        if (c["function"]["name"].get(piece) == simdjson::SUCCESS)
          name += piece;
        if (c["function"]["arguments"].get(piece) == simdjson::SUCCESS)
          args += piece;
      }
    }
    CHECK(finishes.size() == 3);
    for (const auto& [i, f] : finishes)
      CHECK(f == "tool_calls");
    std::set<int64_t> choices_with_calls;
    for (const auto& [key, call] : gathered) {
      choices_with_calls.insert(key.first);
      const std::string as_json = R"([{"id":"chatcmpl-tool-x","type":"function","function":{"name":")" + call.first +
                                  R"(","arguments":)" + json_quote(call.second) + "}}]";
      simdjson::dom::parser pc;
      check_calls(pc.parse(as_json), only);
    }
    CHECK(choices_with_calls.size() == 3);
  }
}

TEST_CASE("tool calls: auto needs the flags, and with them a history of calls and results renders and answers") {
  {
    server s;
    auto r = http(s.port(), "POST", "/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"tools":)" + tools + "}");
    check_openai_error(r, 400);
    CHECK(r.body.find("--enable-auto-tool-choice") != std::string::npos);
    auto none = http(
        s.port(), "POST", "/v1/chat/completions",
        R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"tool_choice":"none","tools":)" + tools + "}");
    CHECK_MESSAGE(none.status == 200, none.body);
    auto unknown = http(s.port(), "POST", "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"hi"}],"tools":)" + tools +
                            R"(,"tool_choice":{"type":"function","function":{"name":"nope"}}})");
    check_openai_error(unknown, 400);
  }
  server s{{"--enable-auto-tool-choice", "--tool-call-parser", "hermes"}};
  auto r = http(
      s.port(), "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"Weather?"},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":1}"}}]},)"
      R"({"role":"tool","tool_call_id":"c1","content":"sunny"}],"max_tokens":5,"temperature":0,"tools":)" +
          tools + "}");
  REQUIRE_MESSAGE(r.status == 200, r.body);
  simdjson::dom::parser p;
  simdjson::dom::element doc = p.parse(r.body);
  // stories260K writes no <tool_call>: the reply is content.
  CHECK(doc["choices"].at(0)["message"]["content"].is_string());
  simdjson::dom::array calls;  // vLLM's ChatMessage: an empty list, never absent
  REQUIRE(doc["choices"].at(0)["message"]["tool_calls"].get(calls) == simdjson::SUCCESS);
  CHECK(calls.size() == 0);
}
