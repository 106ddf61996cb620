// Structured outputs end to end on stories260K at temperature 1 (a model that knows nothing of JSON, so only the
// token masks make the outputs valid): for JSON schemas (nested objects, arrays, enums, required fields, numbers,
// strings with patterns), regexes and choices, every output parses and validates, through response_format,
// structured_outputs and the guided_* fields, on both endpoints, streamed and not.
#include "server_harness.hpp"

#include <regex>
#include <string>
#include <vector>

using namespace actorllm::e2e;

namespace {

// A small JSON-schema validator for the keywords the schemas below use (independent of the server's converter).
bool validates(simdjson::dom::element v, simdjson::dom::element s, std::string& why) {
  simdjson::dom::element k;
  if (s["enum"].get(k) == simdjson::SUCCESS) {
    for (simdjson::dom::element e : k.get_array())
      if (simdjson::minify(e) == simdjson::minify(v))
        return true;
    why = "not in enum: " + simdjson::minify(v);
    return false;
  }
  if (s["const"].get(k) == simdjson::SUCCESS) {
    if (simdjson::minify(k) != simdjson::minify(v)) {
      why = "not the const: " + simdjson::minify(v);
      return false;
    }
    return true;
  }
  std::string_view type;
  if (s["type"].get(type) != simdjson::SUCCESS)
    return true;
  if (type == "object") {
    if (!v.is_object()) {
      why = "not an object";
      return false;
    }
    if (s["required"].get(k) == simdjson::SUCCESS)
      for (simdjson::dom::element r : k.get_array())
        if (v[std::string_view(r)].error() != simdjson::SUCCESS) {
          why = "missing " + std::string{std::string_view(r)};
          return false;
        }
    simdjson::dom::object props;
    if (s["properties"].get(props) == simdjson::SUCCESS)
      for (auto p : props) {
        simdjson::dom::element child;
        if (v[p.key].get(child) == simdjson::SUCCESS && !validates(child, p.value, why))
          return false;
      }
    return true;
  }
  if (type == "array") {
    if (!v.is_array()) {
      why = "not an array";
      return false;
    }
    const auto n = static_cast<int64_t>(v.get_array().size());
    int64_t lim = 0;
    if (s["minItems"].get(lim) == simdjson::SUCCESS && n < lim) {
      why = "too few items";
      return false;
    }
    if (s["maxItems"].get(lim) == simdjson::SUCCESS && n > lim) {
      why = "too many items";
      return false;
    }
    for (simdjson::dom::element item : v.get_array())
      if (!validates(item, s["items"], why))
        return false;
    return true;
  }
  if (type == "string") {
    std::string_view str;
    if (v.get(str) != simdjson::SUCCESS) {
      why = "not a string";
      return false;
    }
    std::string_view pattern;
    if (s["pattern"].get(pattern) == simdjson::SUCCESS &&
        !std::regex_search(std::string{str}, std::regex{std::string{pattern}})) {
      why = "string '" + std::string{str} + "' does not match " + std::string{pattern};
      return false;
    }
    int64_t lim = 0;
    if (s["maxLength"].get(lim) == simdjson::SUCCESS && static_cast<int64_t>(str.size()) > lim) {
      why = "string too long";
      return false;
    }
    return true;
  }
  if (type == "integer") {
    if (!v.is_int64()) {
      why = "not an integer";
      return false;
    }
    int64_t lim = 0;
    if (s["minimum"].get(lim) == simdjson::SUCCESS && v.get_int64().value() < lim) {
      why = "below minimum";
      return false;
    }
    return true;
  }
  if (type == "number")
    return v.is_number() || (why = "not a number", false);
  if (type == "boolean")
    return v.is_bool() || (why = "not a boolean", false);
  return true;
}

std::vector<std::string> choice_texts(const http_reply& r, bool chat) {
  std::vector<std::string> out;
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  REQUIRE_MESSAGE(p.parse(r.body).get(doc) == simdjson::SUCCESS, r.body);
  for (simdjson::dom::element c : doc["choices"].get_array()) {
    CHECK(std::string_view(c["finish_reason"]) == "stop");
    out.emplace_back(chat ? std::string_view(c["message"]["content"]) : std::string_view(c["text"]));
  }
  return out;
}

const char* const schemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","pattern":"^[A-Z][a-z]{1,8}$"},"age":{"type":"integer","minimum":0}},"required":["name","age"]})",
    R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]},"sizes":{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3},"ok":{"type":"boolean"}},"required":["color","sizes"]})",
    R"({"type":"object","properties":{"pet":{"type":"object","properties":{"kind":{"const":"cat"},"weight":{"type":"number"}},"required":["kind","weight"]},"tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":2},"code":{"type":"string","pattern":"^[0-9]{3}-[A-Z]{2}$"}},"required":["pet","code"]})",
};

}  // namespace

TEST_CASE("structured outputs: every output at temperature 1 parses and validates") {
  server s;
  int outputs = 0;
  for (const char* schema : schemas) {
    CAPTURE(schema);
    simdjson::dom::parser sp;
    simdjson::dom::element schema_doc = sp.parse(std::string{schema});
    const std::string bodies[] = {
        std::string{
            R"({"prompt":"Once upon a time","max_tokens":300,"temperature":1,"n":4,"seed":1,"structured_outputs":{"json":)"} +
            schema + "}}",
        std::string{R"({"prompt":"The cat","max_tokens":300,"temperature":1,"n":4,"seed":2,"guided_json":)"} + schema +
            "}",
        std::string{
            R"({"messages":[{"role":"user","content":"Give JSON"}],"max_tokens":300,"temperature":1,"n":4,"seed":3,)"
            R"("response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":)"} +
            schema + "}}}",
    };
    for (const auto& body : bodies) {
      const bool chat = body.starts_with(R"({"messages")");
      auto r = http(s.port(), "POST", chat ? "/v1/chat/completions" : "/v1/completions", body);
      REQUIRE_MESSAGE(r.status == 200, r.body);
      for (const std::string& text : choice_texts(r, chat)) {
        CAPTURE(text);
        simdjson::dom::parser p;
        simdjson::dom::element v;
        REQUIRE(p.parse(text).get(v) == simdjson::SUCCESS);
        std::string why;
        CHECK_MESSAGE(validates(v, schema_doc, why), why);
        ++outputs;
      }
    }
  }
  // Regexes and choices.
  struct pattern_case {
    std::string field, value, check;
  };
  const pattern_case cases[] = {
      {"guided_regex", R"("[A-Z][a-z]+ (is|was) [0-9]{1,3}")", "[A-Z][a-z]+ (is|was) [0-9]{1,3}"},
      {"structured_outputs", R"({"regex":"\\d{3}-\\d{4}"})", "\\d{3}-\\d{4}"},
      {"guided_choice", R"(["happy","sad","angry"])", "happy|sad|angry"},
      {"structured_outputs", R"({"choice":["yes","no"]})", "yes|no"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.value);
    auto r = http(s.port(), "POST", "/v1/completions",
                  R"({"prompt":"Once upon a time","max_tokens":50,"temperature":1,"n":8,"seed":5,")" + c.field +
                      "\":" + c.value + "}");
    REQUIRE_MESSAGE(r.status == 200, r.body);
    for (const std::string& text : choice_texts(r, false)) {
      CHECK_MESSAGE(std::regex_match(text, std::regex{c.check}), text);
      ++outputs;
    }
  }
  // json_object, streamed: the joined deltas are one JSON object.
  auto st =
      http(s.port(), "POST", "/v1/chat/completions",
           R"({"messages":[{"role":"user","content":"x"}],"max_tokens":300,"temperature":1,"seed":9,"stream":true,)"
           R"("response_format":{"type":"json_object"}})");
  REQUIRE(st.status == 200);
  std::string joined;
  for (std::size_t at = st.body.find("data: {"); at != std::string::npos; at = st.body.find("data: {", at + 1)) {
    simdjson::dom::parser pe;
    simdjson::dom::element e = pe.parse(st.body.substr(at + 6, st.body.find("\n\n", at) - at - 6));
    simdjson::dom::array choices = e["choices"];
    if (choices.size() == 0)
      continue;
    std::string_view piece;
    if (choices.at(0)["delta"]["content"].get(piece) == simdjson::SUCCESS)
      joined += piece;
  }
  simdjson::dom::parser pj;
  simdjson::dom::element obj;
  CHECK_MESSAGE(pj.parse(joined).get(obj) == simdjson::SUCCESS, joined);
  CHECK(obj.is_object());
  ++outputs;
  MESSAGE(outputs << " constrained outputs, all valid");
  CHECK(outputs == 3 * 3 * 4 + 4 * 8 + 1);
}

TEST_CASE("structured outputs: unsupported schema features and bad patterns are 400s naming the field") {
  server s;
  struct bad {
    std::string target, body, param;
  };
  const bad cases[] = {
      {"/v1/completions", R"({"prompt":"x","guided_json":{"type":"string","format":"email"}})", "guided_json"},
      {"/v1/completions", R"({"prompt":"x","guided_regex":"(a"})", "guided_regex"},
      {"/v1/completions", R"({"prompt":"x","guided_grammar":"root ::= x"})", "guided_grammar"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer","maximum":3}}}})",
       "response_format.json_schema.schema"},
      {"/v1/completions", R"({"prompt":"x","guided_regex":"a","guided_choice":["b"]})", "guided_choice"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.body);
    auto r = http(s.port(), "POST", c.target, c.body);
    check_openai_error(r, 400);
    simdjson::dom::parser p;
    std::string_view param;
    REQUIRE(p.parse(r.body)["error"]["param"].get(param) == simdjson::SUCCESS);
    CHECK((param == c.param || (c.param == "guided_choice" && param == "guided_regex")));
  }
}
