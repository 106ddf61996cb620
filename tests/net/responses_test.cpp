// Response bodies against the official OpenAI schemas, the SSE framing byte for byte, /v1/models, /version and
// error JSON.
#include "net/openai/responses.hpp"

#include <actorllm/error.hpp>
#include <actorllm/version.hpp>

#include <doctest/doctest.h>
#include <simdjson.h>

#include <string>

#include "net/openai/api_error.hpp"
#include "schema_check.hpp"

using namespace actorllm;
using namespace actorllm::net::openai;

namespace {

actorllm::test::openai_schemas& schemas() {
  static actorllm::test::openai_schemas s;
  return s;
}

void check_schema(std::string_view name, std::string_view json) {
  auto errors = schemas().check(name, json);
  CAPTURE(json);
  CHECK_MESSAGE(errors.empty(), name << ": " << (errors.empty() ? "" : errors.front()));
}

// Token i decodes to "t<i>" (so text offsets are easy to compute); a sequence to their concatenation.
token_decoder test_decoder() {
  token_decoder d;
  d.token = [](int32_t id) { return std::string{"t"}.append(std::to_string(id)); };
  d.detokenize = [](std::span<const int32_t> ids) {
    std::string s;
    for (int32_t id : ids)
      s.append("t").append(std::to_string(id));
    return s;
  };
  return d;
}

response_context context(std::string_view prefix) {
  response_context ctx;
  ctx.id = make_response_id(prefix);
  ctx.created = 1700000000;
  ctx.model = "stories260K";
  ctx.decoder = test_decoder();
  return ctx;
}

request_output sample_output() {
  request_output ro;
  ro.request_id = 7;
  ro.prompt = "Once";
  ro.prompt_token_ids = {1, 9};
  completion_output a;
  a.index = 0;
  a.token_ids = {5, 6};
  a.text = " upon a";
  a.finish_reason = finish_reason::length;
  a.logprobs = {{5, -0.5f, {{5, -0.5f}, {8, -1.5f}}}, {6, -std::numeric_limits<float>::infinity(), {}}};
  completion_output b;
  b.index = 1;
  b.token_ids = {7};
  b.text = " time";
  b.finish_reason = finish_reason::stop;
  b.stop_string = "\n";
  b.logprobs = {{7, -0.25f, {{7, -0.25f}}}};
  ro.outputs = {a, b};
  ro.finished = true;
  ro.usage = {2, 3};
  return ro;
}

simdjson::dom::element parse(simdjson::dom::parser& p, const std::string& json) {
  simdjson::dom::element e;
  REQUIRE_FALSE(p.parse(json).get(e));
  return e;
}

}  // namespace

TEST_CASE("the schema check itself rejects what the schemas forbid") {
  // Without these the schema tests below could not fail.
  auto& s = schemas();
  CHECK_FALSE(s.check("CreateChatCompletionResponse",
                      R"({"id":"x","object":"chat.completion","created":1,)"
                      R"("model":"m","choices":[{"index":0,"finish_reason":"stop",)"
                      R"("logprobs":null,"message":{"role":"assistant","content":"a"}}]})")
                  .empty());  // message.refusal missing
  CHECK_FALSE(s.check("CreateCompletionResponse", R"({"id":"x","object":"text_completion","created":"1",)"
                                                  R"("model":"m","choices":[]})")
                  .empty());  // created is a string
  CHECK_FALSE(s.check("CreateCompletionResponse", R"({"id":"x","object":"chat.completion","created":1,)"
                                                  R"("model":"m","choices":[]})")
                  .empty());  // wrong object
  CHECK_FALSE(s.check("ErrorResponse", R"({"error":{"message":"m","type":"t","param":null,"code":400}})").empty());
  CHECK(s.check("ErrorResponse", R"({"error":{"message":"m","type":"t","param":null,"code":"400"}})").empty());
}

TEST_CASE("text completion response: fields and choices of every prompt and logprobs and usage against the schema") {
  auto ctx = context("cmpl-");
  ctx.n = 2;
  ctx.logprobs = true;
  request_output second = sample_output();
  second.prompt = "";  // a token prompt: no text
  second.usage = {4, 1};
  std::vector<request_output> outs = {sample_output(), second};
  std::string json = completion_response_json(outs, ctx);
  check_schema("CreateCompletionResponse", json);
  CHECK(json.find('\n') == std::string::npos);

  simdjson::dom::parser p;
  auto doc = parse(p, json);
  CHECK(std::string_view(doc["id"]).substr(0, 5) == "cmpl-");
  CHECK(std::string_view(doc["id"]).size() == 5 + 32);
  CHECK(std::string_view(doc["object"]) == "text_completion");
  CHECK(int64_t(doc["created"]) == 1700000000);
  CHECK(std::string_view(doc["model"]) == "stories260K");
  auto choices = doc["choices"].get_array().value();
  REQUIRE(choices.size() == 4);
  CHECK(int64_t(choices.at(2)["index"]) == 2);  // prompt 1, sequence 0
  CHECK(int64_t(choices.at(3)["index"]) == 3);
  auto c0 = choices.at(0);
  CHECK(std::string_view(c0["text"]) == " upon a");
  CHECK(std::string_view(c0["finish_reason"]) == "length");
  CHECK(c0["stop_reason"].is_null());
  CHECK(std::string_view(choices.at(1)["stop_reason"]) == "\n");
  auto lp = c0["logprobs"];
  CHECK(std::string_view(lp["tokens"].at(0)) == "t5");
  CHECK(std::string_view(lp["tokens"].at(1)) == "t6");
  CHECK(double(lp["token_logprobs"].at(0)) == doctest::Approx(-0.5));
  CHECK(double(lp["token_logprobs"].at(1)) == doctest::Approx(-9999.0));  // -inf clamped as vLLM does
  CHECK(double(lp["top_logprobs"].at(0)["t8"]) == doctest::Approx(-1.5));
  // The sampled token joins the top k when it is not among them (legacy completions' logprobs: k).
  CHECK(double(lp["top_logprobs"].at(0)["t5"]) == doctest::Approx(-0.5));
  CHECK(lp["top_logprobs"].at(1).get_object().value().size() == 1);
  CHECK(double(lp["top_logprobs"].at(1)["t6"]) == doctest::Approx(-9999.0));
  CHECK(int64_t(lp["text_offset"].at(0)) == 0);
  CHECK(int64_t(lp["text_offset"].at(1)) == 2);
  auto usage = doc["usage"];
  CHECK(int64_t(usage["prompt_tokens"]) == 6);
  CHECK(int64_t(usage["completion_tokens"]) == 4);
  CHECK(int64_t(usage["total_tokens"]) == 10);
}

TEST_CASE("text completion with echo prepends the prompt (text or detokenized ids) and logprobs null when off") {
  auto ctx = context("cmpl-");
  ctx.echo = true;
  request_output text_prompt = sample_output();
  request_output id_prompt = sample_output();
  id_prompt.prompt.clear();
  std::vector<request_output> outs = {text_prompt, id_prompt};
  ctx.n = 2;
  std::string json = completion_response_json(outs, ctx);
  check_schema("CreateCompletionResponse", json);
  simdjson::dom::parser p;
  auto doc = parse(p, json);
  CHECK(std::string_view(doc["choices"].at(0)["text"]) == "Once upon a");
  CHECK(std::string_view(doc["choices"].at(2)["text"]) == "t1t9 upon a");
  CHECK(doc["choices"].at(0)["logprobs"].is_null());
}

TEST_CASE(
    "chat completion response: assistant message with refusal null and chat logprobs with bytes against the schema") {
  auto ctx = context("chatcmpl-");
  ctx.logprobs = true;
  std::string json = chat_response_json(sample_output(), ctx);
  check_schema("CreateChatCompletionResponse", json);
  simdjson::dom::parser p;
  auto doc = parse(p, json);
  CHECK(std::string_view(doc["id"]).substr(0, 9) == "chatcmpl-");
  CHECK(std::string_view(doc["object"]) == "chat.completion");
  auto c0 = doc["choices"].at(0);
  CHECK(std::string_view(c0["message"]["role"]) == "assistant");
  CHECK(std::string_view(c0["message"]["content"]) == " upon a");
  CHECK(c0["message"]["refusal"].is_null());
  auto content = c0["logprobs"]["content"];
  CHECK(std::string_view(content.at(0)["token"]) == "t5");
  auto bytes = content.at(0)["bytes"].get_array().value();
  REQUIRE(bytes.size() == 2);
  CHECK(int64_t(bytes.at(0)) == 't');
  CHECK(int64_t(bytes.at(1)) == '5');
  CHECK(std::string_view(content.at(0)["top_logprobs"].at(1)["token"]) == "t8");
  CHECK(c0["logprobs"]["refusal"].is_null());
  CHECK(int64_t(doc["usage"]["total_tokens"]) == 5);

  ctx.logprobs = false;
  json = chat_response_json(sample_output(), ctx);
  check_schema("CreateChatCompletionResponse", json);
  CHECK(json.find(R"("logprobs":null)") != std::string::npos);
}

TEST_CASE("SSE framing is exactly data: <json> LF LF and data: [DONE] LF LF") {
  CHECK(sse_event(R"({"a":1})") == "data: {\"a\":1}\n\n");
  CHECK(sse_done() == "data: [DONE]\n\n");
}

TEST_CASE(
    "chat stream byte for byte: role chunk then content deltas with finish_reason on the last then usage chunk then "
    "DONE") {
  response_context ctx;
  ctx.id = "chatcmpl-abc";
  ctx.created = 1;
  ctx.model = "m";
  ctx.include_usage = true;
  chat_stream s{ctx};
  std::string body = s.begin();
  stream_delta d;
  d.text = "Hel";
  d.token_ids = {1};
  body += s.on_delta(d);
  d.text.clear();  // a token that completes no character yet: nothing to send
  CHECK(s.on_delta(d).empty());
  d.text = "lo\n\"x\"";
  d.finish_reason = finish_reason::stop;
  body += s.on_delta(d);
  body += s.end(usage_info{3, 2});
  const std::string head = R"({"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1,"model":"m",)";
  const std::string expected =
      "data: " + head +
      R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],)"
      R"("usage":null})"
      "\n\n"
      "data: " +
      head +
      R"("choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}],"usage":null})"
      "\n\n"
      "data: " +
      head +
      R"("choices":[{"index":0,"delta":{"content":"lo\n\"x\""},"logprobs":null,"finish_reason":"stop"}],)"
      R"("usage":null})"
      "\n\n"
      "data: " +
      head +
      R"("choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}})"
      "\n\n"
      "data: [DONE]\n\n";
  CHECK(body == expected);

  // Every event's JSON validates as a stream chunk.
  std::size_t pos = 0;
  int events = 0;
  while (pos < body.size()) {
    REQUIRE(body.compare(pos, 6, "data: ") == 0);
    std::size_t end = body.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    std::string payload = body.substr(pos + 6, end - pos - 6);
    if (payload != "[DONE]")
      check_schema("CreateChatCompletionStreamResponse", payload);
    ++events;
    pos = end + 2;
  }
  CHECK(events == 5);
}

TEST_CASE("chat stream without include_usage ends with DONE only and n > 1 sends a role chunk per choice") {
  auto ctx = context("chatcmpl-");
  ctx.n = 2;
  ctx.logprobs = true;
  chat_stream s{ctx};
  std::string begin = s.begin();
  CHECK(begin.find(R"("index":0,"delta":{"role":"assistant")") != std::string::npos);
  CHECK(begin.find(R"("index":1,"delta":{"role":"assistant")") != std::string::npos);
  CHECK(begin.find("usage") == std::string::npos);
  stream_delta d;
  d.index = 1;
  d.text = "t4";
  d.logprobs = {{4, -0.1f, {}}};
  std::string ev = s.on_delta(d);
  REQUIRE(ev.size() > 8);
  std::string payload = ev.substr(6, ev.size() - 8);
  check_schema("CreateChatCompletionStreamResponse", payload);
  CHECK(payload.find(R"("index":1)") != std::string::npos);
  CHECK(payload.find(R"("logprobs":{"content":[{"token":"t4","logprob":)") != std::string::npos);
  CHECK(s.end(usage_info{1, 1}) == "data: [DONE]\n\n");
}

TEST_CASE("chat stream with auto tool choice: text before a call streams, the call comes whole at the end") {
  auto ctx = context("chatcmpl-");
  ctx.tools = response_context::tool_mode::parse;
  ctx.parser = tool_parser::hermes;
  chat_stream s{ctx};
  auto delta = [&](std::string text, bool last = false) {
    stream_delta d;
    d.text = std::move(text);
    d.token_ids = {1};
    if (last)
      d.finish_reason = finish_reason::stop;
    return s.on_delta(d);
  };
  std::string ev = delta("Sure, ");
  CHECK(ev.find(R"("delta":{"content":"Sure, "})") != std::string::npos);
  CHECK(delta("<tool_").empty());  // could start the marker: held back
  CHECK(delta(R"(call>{"name":"get_weather","arguments":{"city":"Paris"}})").empty());
  ev = delta("</tool_call>", true);
  REQUIRE(ev.size() > 8);
  const std::string payload = ev.substr(6, ev.size() - 8);
  check_schema("CreateChatCompletionStreamResponse", payload);
  CHECK(payload.find(R"("tool_calls":[{"index":0,"id":"chatcmpl-tool-)") != std::string::npos);
  CHECK(payload.find(R"("name":"get_weather","arguments":"{\"city\":\"Paris\"}")") != std::string::npos);
  CHECK(payload.find(R"("finish_reason":"tool_calls")") != std::string::npos);
  CHECK(payload.find("content") == std::string::npos);

  // Plain text: a held-back "<" that starts no call goes out with the rest.
  chat_stream plain{ctx};
  stream_delta a;
  a.text = "Hello <";
  std::string first = plain.on_delta(a);
  CHECK(first.find(R"("content":"Hello ")") != std::string::npos);
  stream_delta b;
  b.text = "world";
  b.finish_reason = finish_reason::stop;
  std::string last = plain.on_delta(b);
  CHECK(last.find(R"("content":"<world")") != std::string::npos);
  CHECK(last.find(R"("finish_reason":"stop")") != std::string::npos);
}

TEST_CASE("completion stream: echo first then text chunks with running text_offset then usage chunk then DONE") {
  response_context ctx;
  ctx.id = "cmpl-1";
  ctx.created = 2;
  ctx.model = "m";
  ctx.echo = true;
  ctx.logprobs = true;
  ctx.include_usage = true;
  ctx.decoder = test_decoder();
  completion_stream s{ctx};
  request_output prompt;
  prompt.prompt = "Hi";
  std::vector<request_output> prompts{prompt};
  std::string body = s.begin(prompts);
  const std::string head = R"({"id":"cmpl-1","object":"text_completion","created":2,"model":"m",)";
  CHECK(body == "data: " + head +
                    R"("choices":[{"index":0,"text":"Hi","logprobs":null,"finish_reason":null}]})"
                    "\n\n");
  stream_delta d;
  d.text = "t3";
  d.token_ids = {3};
  d.logprobs = {{3, -1.0f, {{3, -1.0f}}}};
  std::string ev = s.on_delta(0, d);
  CHECK(ev == "data: " + head +
                  R"("choices":[{"index":0,"text":"t3","logprobs":{"tokens":["t3"],"token_logprobs":[-1],)"
                  R"("top_logprobs":[{"t3":-1}],"text_offset":[2]},"finish_reason":null}]})"
                  "\n\n");
  d.text = "t12";
  d.logprobs = {{12, -2.0f, {}}};
  d.finish_reason = finish_reason::length;
  ev = s.on_delta(0, d);
  CHECK(ev.find(R"("text_offset":[4]},"finish_reason":"length")") != std::string::npos);
  check_schema("CreateCompletionResponse", ev.substr(6, ev.size() - 8));
  CHECK(s.end(usage_info{1, 2}) ==
        "data: " + head + R"("choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}})" +
            "\n\n" + "data: [DONE]\n\n");
}

TEST_CASE("/v1/models and /version") {
  std::vector<model_card> cards{{"stories260K", 1700000000, "actorllm", "/models/stories260K", 512, {}},
                                {"other", 5, "me", "", 1024, {}},
                                {"sql-lora", 6, "actorllm", "/adapters/sql", 512, "stories260K"}};
  std::string json = models_json(cards);
  check_schema("ListModelsResponse", json);
  CHECK(json ==
        R"({"object":"list","data":[{"id":"stories260K","object":"model","created":1700000000,"owned_by":"actorllm",)"
        R"("root":"/models/stories260K","parent":null,"max_model_len":512},{"id":"other","object":"model",)"
        R"("created":5,"owned_by":"me","root":"other","parent":null,"max_model_len":1024},{"id":"sql-lora",)"
        R"("object":"model","created":6,"owned_by":"actorllm","root":"/adapters/sql","parent":"stories260K",)"
        R"("max_model_len":512}]})");
  CHECK(version_json() == R"({"version":")" + std::string{actorllm::version_string} + R"("})");
}

TEST_CASE("api_error: constructors and OpenAI's error JSON") {
  auto e = api_error::bad_request("temperature must be >= 0, got -1", "temperature");
  CHECK(to_json(e) ==
        R"({"error":{"message":"temperature must be >= 0, got -1","type":"BadRequestError","param":"temperature",)"
        R"("code":"400"}})");
  check_schema("ErrorResponse", to_json(e));
  CHECK(api_error::unauthorized().status == 401);
  CHECK(api_error::not_found("The model `x` does not exist.", "model").status == 404);
  CHECK(api_error::payload_too_large("too big").status == 413);
  auto busy = api_error::too_many_requests("queue full", 2);
  CHECK(busy.status == 429);
  CHECK(busy.retry_after_seconds == 2);
  CHECK(api_error::internal("bug").status == 500);
  CHECK(api_error::unavailable("engine failed").type == "ServiceUnavailableError");
  CHECK(to_json(api_error::internal("x")).find(R"("param":null)") != std::string::npos);
  for (const api_error& any : {api_error::unauthorized(), api_error::not_found("n"), api_error::payload_too_large("p"),
                               busy, api_error::internal("i"), api_error::unavailable("u")})
    check_schema("ErrorResponse", to_json(any));

  CHECK(from_engine_error(actorllm::error{errc::invalid_argument, "bad id"}).status == 400);
  CHECK(from_engine_error(actorllm::error{errc::exceeds_max_model_len, "long"}).status == 400);
  CHECK(from_engine_error(actorllm::error{errc::engine_failure, "shard died"}).status == 503);
  CHECK(from_engine_error(actorllm::error{errc::internal, "oops"}).status == 500);
  CHECK(from_engine_error(actorllm::error{errc::invalid_argument, "bad id"}).message == "bad id");
}

TEST_CASE(
    "chat response tool shapes as vLLM: tool_calls always a list and content empty for named or required "
    "choices") {
  auto one = [](std::string text, finish_reason reason) {
    request_output ro;
    ro.request_id = 1;
    completion_output o;
    o.text = std::move(text);
    o.token_ids = {5};
    o.finish_reason = reason;
    ro.outputs = {o};
    ro.finished = true;
    ro.usage = {2, 1};
    return ro;
  };
  auto ctx = context("chatcmpl-");
  std::string plain = chat_response_json(one(" hello", finish_reason::stop), ctx);
  CHECK(plain.find(R"("content":" hello","refusal":null,"tool_calls":[])") != std::string::npos);
  check_schema("CreateChatCompletionResponse", plain);

  ctx.tools = response_context::tool_mode::named;
  ctx.named_tool = "get_weather";
  std::string named = chat_response_json(one(R"({"city":"Paris"})", finish_reason::stop), ctx);
  CHECK(named.find(R"("content":"","refusal":null,"tool_calls":[{)") != std::string::npos);
  CHECK(named.find(R"("name":"get_weather")") != std::string::npos);

  ctx.tools = response_context::tool_mode::required;
  std::string cut = chat_response_json(one(R"([{"name":"get_wea)", finish_reason::length), ctx);
  CHECK(cut.find(R"("content":"","refusal":null,"tool_calls":[])") != std::string::npos);
  CHECK(cut.find(R"("finish_reason":"length")") != std::string::npos);
  std::string required =
      chat_response_json(one(R"([{"name":"get_weather","parameters":{"city":"Paris"}}])", finish_reason::stop), ctx);
  CHECK(required.find(R"("content":"","refusal":null,"tool_calls":[{)") != std::string::npos);
  CHECK(required.find(R"("finish_reason":"tool_calls")") != std::string::npos);
}

TEST_CASE("logprob_token_ids: chat lists the sampled token then the listed ones once, completions each listed once") {
  // The engine's top holds the listed ids as the request gave them: 8, 5 (the sampled token) and 8 again.
  request_output ro;
  ro.prompt_token_ids = {1};
  completion_output out;
  out.token_ids = {5};
  out.text = "t5";
  out.finish_reason = finish_reason::length;
  out.logprobs = {{5, -0.5f, {{8, -2.0f}, {5, -0.5f}, {8, -2.0f}}}};
  ro.outputs = {out};
  ro.usage = {1, 1};
  auto ctx = context("chatcmpl-");
  ctx.logprobs = true;
  ctx.logprob_token_ids = true;
  std::string json = chat_response_json(ro, ctx);
  check_schema("CreateChatCompletionResponse", json);
  simdjson::dom::parser p;
  auto top = parse(p, json)["choices"].at(0)["logprobs"]["content"].at(0)["top_logprobs"].get_array().value();
  REQUIRE(top.size() == 2);
  CHECK(std::string_view(top.at(0)["token"]) == "t5");
  CHECK(double(top.at(0)["logprob"]) == doctest::Approx(-0.5));
  CHECK(std::string_view(top.at(1)["token"]) == "t8");
  CHECK(double(top.at(1)["logprob"]) == doctest::Approx(-2.0));
  // Streamed the same.
  ctx.include_usage = false;
  chat_stream s{ctx};
  stream_delta d;
  d.text = "t5";
  d.token_ids = {5};
  d.logprobs = out.logprobs;
  const std::string chunk = s.on_delta(d);
  simdjson::dom::parser p2;
  auto streamed = parse(p2, chunk.substr(6, chunk.size() - 8))["choices"].at(0)["logprobs"]["content"].at(0);
  CHECK(streamed["top_logprobs"].get_array().size() == 2);
  // Completions: a dict of every listed token and the sampled one, each once.
  auto cctx = context("cmpl-");
  cctx.logprobs = true;
  cctx.logprob_token_ids = true;
  json = completion_response_json(std::span<const request_output>(&ro, 1), cctx);
  check_schema("CreateCompletionResponse", json);
  simdjson::dom::parser p3;
  auto dict = parse(p3, json)["choices"].at(0)["logprobs"]["top_logprobs"].at(0).get_object().value();
  CHECK(dict.size() == 2);
  CHECK(double(dict["t8"]) == doctest::Approx(-2.0));
  CHECK(double(dict["t5"]) == doctest::Approx(-0.5));
}

TEST_CASE("batch chat response: one choice per conversation, its own echo, usage over all, prompt fields null") {
  request_output a;
  a.prompt_token_ids = {1, 2};
  completion_output oa;
  oa.token_ids = {5, 6};
  oa.text = " upon";
  oa.finish_reason = finish_reason::length;
  oa.logprobs = {{5, -0.5f, {}}, {6, -0.25f, {}}};
  a.outputs = {oa};
  a.usage = {2, 2, 1};
  request_output b;
  b.prompt_token_ids = {1, 3, 4};
  completion_output ob;
  ob.token_ids = {7};
  ob.text = " time";
  ob.finish_reason = finish_reason::stop;
  ob.stop_token_id = 2;
  ob.logprobs = {{7, -1.0f, {}}};
  b.outputs = {ob};
  b.usage = {3, 1};
  const std::vector<request_output> outputs{a, b};
  const std::vector<std::string> echo{"", "Once"};
  auto ctx = context("chatcmpl-");
  ctx.logprobs = true;
  ctx.return_token_ids = true;
  ctx.prompt_tokens_details = true;
  const std::string json = chat_batch_response_json(outputs, ctx, echo);
  check_schema("CreateChatCompletionResponse", json);
  simdjson::dom::parser p;
  auto doc = parse(p, json);
  CHECK(std::string_view(doc["object"]) == "chat.completion");
  auto choices = doc["choices"].get_array().value();
  REQUIRE(choices.size() == 2);
  CHECK(int64_t(choices.at(0)["index"]) == 0);
  CHECK(int64_t(choices.at(1)["index"]) == 1);
  CHECK(std::string_view(choices.at(0)["message"]["content"]) == " upon");
  CHECK(std::string_view(choices.at(1)["message"]["content"]) == "Once time");
  CHECK(choices.at(0)["logprobs"]["content"].get_array().size() == 2);
  CHECK(choices.at(1)["logprobs"]["content"].get_array().size() == 1);
  CHECK(std::string_view(choices.at(1)["finish_reason"]) == "stop");
  CHECK(int64_t(choices.at(1)["stop_reason"]) == 2);
  CHECK(choices.at(1)["token_ids"].get_array().size() == 1);
  CHECK(int64_t(doc["usage"]["prompt_tokens"]) == 5);
  CHECK(int64_t(doc["usage"]["completion_tokens"]) == 3);
  CHECK(int64_t(doc["usage"]["total_tokens"]) == 8);
  CHECK(int64_t(doc["usage"]["prompt_tokens_details"]["cached_tokens"]) == 1);
  CHECK(doc["prompt_logprobs"].is_null());
  CHECK(doc["prompt_token_ids"].is_null());
}
