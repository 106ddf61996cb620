// --reasoning-parser: thinking models' replies split into reasoning and content, whole and streamed (tags split
// over pieces at every point), and the chat response and stream shapes that carry them.
#include "net/openai/reasoning_parser.hpp"
#include "net/openai/responses.hpp"
#include "support/test_paths.hpp"

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

namespace {

// The stream's reasoning, content, tool calls (name, arguments) and last finish_reason, pieced together.
struct streamed_reply {
  std::string reasoning, content, name, arguments, finish;
  int chunks_with_calls = 0;
};

streamed_reply stream_reply(const response_context& ctx, const std::vector<std::string>& pieces) {
  chat_stream s{ctx};
  std::string body = s.begin();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    stream_delta d;
    d.text = pieces[i];
    d.token_ids = {1};
    if (i + 1 == pieces.size())
      d.finish_reason = finish_reason::stop;
    body += s.on_delta(d);
  }
  streamed_reply out;
  for (std::size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    const std::size_t end = body.find("\n\n", at);
    simdjson::dom::parser p;
    simdjson::dom::element choice = p.parse(body.substr(at + 6, end - at - 6))["choices"].at(0);
    simdjson::dom::element delta = choice["delta"];
    std::string_view v;
    if (delta["reasoning_content"].get(v) == simdjson::SUCCESS)
      out.reasoning += v;
    if (delta["content"].get(v) == simdjson::SUCCESS)
      out.content += v;
    simdjson::dom::array calls;
    if (delta["tool_calls"].get(calls) == simdjson::SUCCESS) {
      ++out.chunks_with_calls;
      for (simdjson::dom::element call : calls) {
        if (call["function"]["name"].get(v) == simdjson::SUCCESS)
          out.name += v;
        if (call["function"]["arguments"].get(v) == simdjson::SUCCESS)
          out.arguments += v;
      }
    }
    if (choice["finish_reason"].get(v) == simdjson::SUCCESS)
      out.finish = v;
    at = end;
  }
  return out;
}

}  // namespace

TEST_CASE(
    "reasoning parser with structured outputs and forced tool choices: the JSON after </think> is the content "
    "or the calls") {
  response_context ctx;
  ctx.id = "chatcmpl-r";
  ctx.created = 1;
  ctx.model = "m";
  ctx.reasoning = reasoning_format::deepseek_r1;
  request_output ro;
  completion_output out;
  out.finish_reason = finish_reason::stop;
  ro.outputs.push_back(out);
  simdjson::dom::parser parser;
  const std::vector<std::string> pieces{"let me", " see</th", "ink>", R"({"city":)", R"("Paris"})"};

  SUBCASE("structured outputs: the JSON is the content") {
    ro.outputs[0].text = R"(let me see</think>{"city":"Paris"})";
    simdjson::dom::element msg = parser.parse(chat_response_json(ro, ctx))["choices"].at(0)["message"];
    CHECK(std::string_view(msg["reasoning_content"]) == "let me see");
    CHECK(std::string_view(msg["content"]) == R"({"city":"Paris"})");
    const streamed_reply r = stream_reply(ctx, pieces);
    CHECK(r.reasoning == "let me see");
    CHECK(r.content == R"({"city":"Paris"})");
  }
  SUBCASE("tool_choice required: the calls' JSON after the reasoning becomes tool_calls") {
    ctx.tools = response_context::tool_mode::required;
    ro.outputs[0].text = R"(let me see</think>[{"name":"weather","parameters":{"city":"Paris"}}])";
    simdjson::dom::element choice = parser.parse(chat_response_json(ro, ctx))["choices"].at(0);
    simdjson::dom::element msg = choice["message"];
    CHECK(std::string_view(msg["reasoning_content"]) == "let me see");
    CHECK(std::string_view(msg["content"]).empty());
    REQUIRE(msg["tool_calls"].get_array().size() == 1);
    CHECK(std::string_view(msg["tool_calls"].at(0)["function"]["name"]) == "weather");
    CHECK(std::string_view(msg["tool_calls"].at(0)["function"]["arguments"]) == R"({"city":"Paris"})");
    CHECK(std::string_view(choice["finish_reason"]) == "tool_calls");
    const streamed_reply r = stream_reply(
        ctx, {"let me", " see</th", "ink>", R"([{"name":"weather",)", R"("parameters":{"city":"Paris"}}])"});
    CHECK(r.reasoning == "let me see");
    CHECK(r.content.empty());
    CHECK(r.name == "weather");
    CHECK(r.arguments == R"({"city":"Paris"})");
    CHECK(r.chunks_with_calls == 1);
    CHECK(r.finish == "tool_calls");
  }
  SUBCASE("a named function: the arguments after the reasoning, streamed as argument deltas") {
    ctx.tools = response_context::tool_mode::named;
    ctx.named_tool = "weather";
    ro.outputs[0].text = R"(let me see</think>{"city":"Paris"})";
    simdjson::dom::element msg = parser.parse(chat_response_json(ro, ctx))["choices"].at(0)["message"];
    CHECK(std::string_view(msg["reasoning_content"]) == "let me see");
    REQUIRE(msg["tool_calls"].get_array().size() == 1);
    CHECK(std::string_view(msg["tool_calls"].at(0)["function"]["name"]) == "weather");
    CHECK(std::string_view(msg["tool_calls"].at(0)["function"]["arguments"]) == R"({"city":"Paris"})");
    const streamed_reply r = stream_reply(ctx, pieces);
    CHECK(r.reasoning == "let me see");
    CHECK(r.name == "weather");
    CHECK(r.arguments == R"({"city":"Paris"})");
    CHECK(r.finish == "tool_calls");
  }
}

TEST_CASE(
    "reasoning parser with a constraint: the sampler gets the think tokens, a tokenizer without </think> is a 400") {
  const text::tokenizer qwen3 =
      text::tokenizer::from_directory(actorllm::test::shared_dir() / "models" / "tokenizers" / "qwen3");
  const text::tokenizer stories = text::tokenizer::from_directory(actorllm::test::model_dir("stories260K"));
  common_request r;
  r.params.structured_pattern = "\\d+";
  r.structured_param = "response_format";
  CHECK(!constrain_after_reasoning(r, &qwen3, ""));  // no reasoning parser: nothing changes
  CHECK(r.params.reasoning_end_token_id == -1);
  REQUIRE(!constrain_after_reasoning(r, &qwen3, "qwen3"));
  CHECK(r.params.reasoning_end_token_id == 151668);    // </think>
  CHECK(r.params.reasoning_start_token_id == 151667);  // <think>

  common_request tool_choice;
  tool_choice.params.structured_pattern = "\\[";
  tool_choice.structured_param = "tool_choice";  // required or named: the calls' JSON after the reasoning
  REQUIRE(!constrain_after_reasoning(tool_choice, &qwen3, "deepseek_r1"));
  CHECK(tool_choice.params.reasoning_end_token_id == 151668);

  common_request unconstrained;
  REQUIRE(!constrain_after_reasoning(unconstrained, &qwen3, "qwen3"));  // no constraint: nothing to gate
  CHECK(unconstrained.params.reasoning_end_token_id == -1);

  common_request refused = tool_choice;
  refused.params.reasoning_end_token_id = -1;
  auto err = constrain_after_reasoning(refused, &stories, "deepseek_r1");
  REQUIRE(err);
  CHECK(err->param == "tool_choice");
  CHECK(err->message.find("the tokenizer has no </think> token") != std::string::npos);
  CHECK(constrain_after_reasoning(refused, nullptr, "qwen3"));  // no tokenizer at all
}
