// --reasoning-parser: thinking models' replies split into reasoning and content, whole and streamed (tags split
// over pieces at every point), and the chat response and stream shapes that carry them.
#include "net/openai/reasoning_parser.hpp"
#include "net/openai/responses.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <string>
#include <vector>

using namespace actorllm;
using namespace actorllm::net::openai;

namespace {

struct split_case {
  reasoning_format format;
  std::string text;
  std::optional<std::string> reasoning;
  std::string content;
};

const std::vector<split_case>& cases() {
  static const std::vector<split_case> c = {
      {reasoning_format::qwen3, "<think>\nplan\n</think>\n\nAnswer", "\nplan\n", "\n\nAnswer"},
      {reasoning_format::qwen3, "Answer without thinking", std::nullopt, "Answer without thinking"},
      {reasoning_format::qwen3, "<think></think>hi", "", "hi"},
      {reasoning_format::qwen3, "<think>cut off while thinking", "cut off while thinking", ""},
      {reasoning_format::qwen3, "<thin", std::nullopt, "<thin"},  // no tag after all
      {reasoning_format::qwen3, "a < b </thinking> c", std::nullopt, "a < b </thinking> c"},
      {reasoning_format::deepseek_r1, "plan</think>Answer", "plan", "Answer"},
      {reasoning_format::deepseek_r1, "<think>plan</think>Answer", "plan", "Answer"},
      {reasoning_format::deepseek_r1, "x </thin y</think>z", "x </thin y", "z"},
      {reasoning_format::deepseek_r1, "all reasoning", "all reasoning", ""},
      {reasoning_format::deepseek_r1, "r</think>c</think>d", "r", "c</think>d"},  // the first end tag ends it
  };
  return c;
}

}  // namespace

TEST_CASE("reasoning parser: a whole reply splits at the tags, per format") {
  for (const split_case& c : cases()) {
    CAPTURE(c.text);
    const reasoning_split s = split_reasoning(c.format, c.text);
    CHECK(s.reasoning == c.reasoning);
    CHECK(s.content == c.content);
  }
  CHECK(parse_reasoning_format("qwen3") == reasoning_format::qwen3);
  CHECK(parse_reasoning_format("deepseek_r1") == reasoning_format::deepseek_r1);
  CHECK_FALSE(parse_reasoning_format("granite").has_value());
}

TEST_CASE("reasoning parser: streamed in two or three pieces cut anywhere, or byte by byte, it gives the same split") {
  for (const split_case& c : cases()) {
    CAPTURE(c.text);
    auto run = [&](const std::vector<std::string>& pieces) {
      reasoning_stream s{c.format};
      std::string reasoning, content;
      for (const std::string& p : pieces) {
        auto d = s.push(p);
        reasoning += d.reasoning;
        content += d.content;
        CHECK(d.reasoning.find("</think>") == std::string::npos);
      }
      auto d = s.finish();
      reasoning += d.reasoning;
      content += d.content;
      CHECK(reasoning == c.reasoning.value_or(""));
      CHECK(content == c.content);
    };
    for (std::size_t i = 0; i <= c.text.size(); ++i)
      for (std::size_t j = i; j <= c.text.size(); ++j)
        run({c.text.substr(0, i), c.text.substr(i, j - i), c.text.substr(j)});
    std::vector<std::string> bytes;
    for (char ch : c.text)
      bytes.emplace_back(1, ch);
    run(bytes);
  }
}

TEST_CASE("reasoning parser: chat replies carry reasoning_content and reasoning, streamed as reasoning deltas") {
  response_context ctx;
  ctx.id = "chatcmpl-r";
  ctx.created = 1;
  ctx.model = "m";
  ctx.reasoning = reasoning_format::qwen3;
  request_output ro;
  completion_output out;
  out.text = "<think>because</think>Yes";
  out.finish_reason = finish_reason::stop;
  ro.outputs.push_back(out);
  simdjson::dom::parser parser;
  std::string json = chat_response_json(ro, ctx);
  simdjson::dom::element msg = parser.parse(json)["choices"].at(0)["message"];
  CHECK(std::string_view(msg["reasoning_content"]) == "because");
  CHECK(std::string_view(msg["reasoning"]) == "because");
  CHECK(std::string_view(msg["content"]) == "Yes");

  ctx.include_reasoning = false;  // the request's include_reasoning: false
  json = chat_response_json(ro, ctx);
  msg = parser.parse(json)["choices"].at(0)["message"];
  CHECK(msg["reasoning_content"].is_null());
  CHECK(std::string_view(msg["content"]) == "Yes");

  ctx.include_reasoning = true;
  ro.outputs[0].text = "<think>still thinking";  // cut off by max_tokens: no content
  json = chat_response_json(ro, ctx);
  msg = parser.parse(json)["choices"].at(0)["message"];
  CHECK(std::string_view(msg["reasoning_content"]) == "still thinking");
  CHECK(msg["content"].is_null());

  chat_stream s{ctx};
  std::string body = s.begin();
  for (std::string piece : {"<thi", "nk>bec", "ause</th", "ink>Y", "es"}) {
    stream_delta d;
    d.text = piece;
    d.token_ids = {1};
    if (piece == "es")
      d.finish_reason = finish_reason::stop;
    body += s.on_delta(d);
  }
  std::string reasoning, content;
  for (std::size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    const std::size_t end = body.find("\n\n", at);
    simdjson::dom::parser p;
    simdjson::dom::element delta = p.parse(body.substr(at + 6, end - at - 6))["choices"].at(0)["delta"];
    std::string_view r, c;
    if (delta["reasoning_content"].get(r) == simdjson::SUCCESS)
      reasoning += r;
    if (delta["content"].get(c) == simdjson::SUCCESS)
      content += c;
    at = end;
  }
  CHECK(reasoning == "because");
  CHECK(content == "Yes");
  CHECK(body.find("think>") == std::string::npos);  // no tag, nor a piece of one, reaches the client
}
