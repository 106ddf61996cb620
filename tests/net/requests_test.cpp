// Parsing of /v1/completions and /v1/chat/completions bodies: every field kind, and every error naming its field.
#include "net/openai/requests.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace actorllm::net::openai;

namespace {

// The error of a body that must be refused; fails the test when it parses.
template <class Result>
api_error error_of(const Result& r) {
  REQUIRE_FALSE(r.has_value());
  return r.error();
}

api_error completion_error(std::string_view body) { return error_of(parse_completion_request(body)); }
api_error chat_error(std::string_view body) { return error_of(parse_chat_request(body)); }

completion_request completion_ok(std::string_view body) {
  auto r = parse_completion_request(body);
  if (!r)
    FAIL("unexpected error: " << r.error().message);
  return *r;
}

chat_request chat_ok(std::string_view body) {
  auto r = parse_chat_request(body);
  if (!r)
    FAIL("unexpected error: " << r.error().message);
  return *r;
}

}  // namespace

TEST_CASE("completions: prompt as a string or a list of strings or token ids or lists of token ids") {
  auto r = completion_ok(R"({"model":"m","prompt":"Once upon"})");
  CHECK(r.model == "m");
  REQUIRE(r.prompts.size() == 1);
  CHECK_FALSE(r.prompts[0].is_tokens());
  CHECK(r.prompts[0].text() == "Once upon");
  CHECK(r.params.max_tokens == 16);  // OpenAI's default for completions

  r = completion_ok(R"({"prompt":["a","b"]})");
  REQUIRE(r.prompts.size() == 2);
  CHECK(r.prompts[1].text() == "b");
  CHECK(r.model.empty());

  r = completion_ok(R"({"prompt":[1,2,3.0]})");
  REQUIRE(r.prompts.size() == 1);
  CHECK(r.prompts[0].is_tokens());
  CHECK(r.prompts[0].token_ids() == std::vector<int32_t>{1, 2, 3});

  r = completion_ok(R"({"prompt":[[5],[6,7]]})");
  REQUIRE(r.prompts.size() == 2);
  CHECK(r.prompts[0].token_ids() == std::vector<int32_t>{5});
  CHECK(r.prompts[1].token_ids() == std::vector<int32_t>{6, 7});
}

TEST_CASE("completions: every sampling field maps onto sampling_params") {
  auto r = completion_ok(R"({"prompt":"x","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,
    "n":3,"stop":["\n","END"],"stop_token_ids":[2,3],"seed":42,"logprobs":5,"presence_penalty":0.5,
    "frequency_penalty":-0.5,"repetition_penalty":1.1,"ignore_eos":true,"stream":true,
    "stream_options":{"include_usage":true,"continuous_usage_stats":false},"user":"u1","skip_special_tokens":false,
    "include_stop_str_in_output":true,"min_tokens":2,"priority":-3,"suffix":null})");
  const auto& p = r.params;
  CHECK(p.max_tokens == 7);
  CHECK(p.temperature == doctest::Approx(0.5));
  CHECK(p.top_p == doctest::Approx(0.9));
  CHECK(p.top_k == 40);
  CHECK(p.min_p == doctest::Approx(0.05));
  CHECK(p.n == 3);
  CHECK(p.stop == std::vector<std::string>{"\n", "END"});
  CHECK(p.stop_token_ids == std::vector<int32_t>{2, 3});
  CHECK(p.seed == 42u);
  CHECK(p.logprobs == 5);
  CHECK(p.presence_penalty == doctest::Approx(0.5));
  CHECK(p.frequency_penalty == doctest::Approx(-0.5));
  CHECK(p.repetition_penalty == doctest::Approx(1.1));
  CHECK(p.ignore_eos);
  CHECK_FALSE(p.skip_special_tokens);
  CHECK(p.include_stop_str_in_output);
  CHECK(p.min_tokens == 2);
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.user == "u1");
  CHECK(r.priority == -3);

  auto s = completion_ok(R"({"prompt":"x","stop":"###","seed":-1,"echo":true,"temperature":0})");
  CHECK(s.params.stop == std::vector<std::string>{"###"});
  CHECK(s.params.seed == ~uint64_t{0});
  CHECK(s.echo);
  CHECK(s.params.temperature == 0.0f);
}

TEST_CASE("completions: prompt_logprobs, echo with logprobs scores the prompt, echo with max_tokens 0 scores only") {
  auto plain = completion_ok(R"({"prompt":"x","prompt_logprobs":3})");
  CHECK(plain.params.prompt_logprobs == 3);
  CHECK_FALSE(plain.echo_only);
  // vLLM: echo with logprobs k computes prompt logprobs of the same k.
  auto echoed = completion_ok(R"({"prompt":"x","echo":true,"logprobs":2})");
  CHECK(echoed.params.prompt_logprobs == 2);
  CHECK(echoed.params.logprobs == 2);
  // lm-evaluation-harness's loglikelihood request: nothing generated for the client; the engine runs one token.
  auto scoring = completion_ok(R"({"prompt":"x","echo":true,"logprobs":1,"max_tokens":0,"temperature":0})");
  CHECK(scoring.echo_only);
  CHECK(scoring.params.max_tokens == 1);
  CHECK(scoring.params.prompt_logprobs == 1);
  auto chat = chat_ok(R"({"messages":[{"role":"user","content":"x"}],"prompt_logprobs":0})");
  CHECK(chat.params.prompt_logprobs == 0);
  CHECK(completion_error(R"({"prompt":"x","max_tokens":0})").param == "max_tokens");  // without echo: refused
  CHECK(completion_error(R"({"prompt":"x","echo":true,"max_tokens":0,"stream":true})").param == "max_tokens");
}

TEST_CASE("top_logprobs -1 is --max-logprobs, tool_choice none needs no tools, continuous usage needs include_usage") {
  auto all = chat_ok(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":-1})");
  CHECK(all.top_logprobs == 20);
  CHECK(all.params.logprobs == 20);
  auto none = chat_ok(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"none"})");
  CHECK(none.tool_choice == "none");
  auto bare = completion_ok(R"({"prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":true}})");
  CHECK_FALSE(bare.continuous_usage_stats);  // vLLM: no usage anywhere without include_usage
  auto both = completion_ok(
      R"({"prompt":"x","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}})");
  CHECK(both.continuous_usage_stats);
}

TEST_CASE("null means not given and unknown fields are ignored") {
  auto r = completion_ok(R"({"prompt":"x","max_tokens":null,"temperature":null,"stop":null,"stream_options":null,
    "logit_bias":null,"whatever":{"deep":[1,2,3]}})");
  CHECK(r.ignored_fields == std::vector<std::string>{"whatever"});
  CHECK(r.params.max_tokens == 16);
  CHECK(r.params.temperature == 1.0f);
  CHECK(r.params.stop.empty());
}

TEST_CASE("chat: messages with string content and text parts and every role") {
  auto r = chat_ok(R"({"model":"m","messages":[
      {"role":"system","content":"be brief"},
      {"role":"developer","content":"dev"},
      {"role":"user","content":[{"type":"text","text":"Hello"},{"type":"text","text":"world"}],"name":"bob"},
      {"role":"assistant","content":null},
      {"role":"tool","content":"42","tool_call_id":"t1"}]})");
  REQUIRE(r.messages.size() == 5);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[0].content == "be brief");
  CHECK(r.messages[0].parts == std::vector<std::string>{"be brief"});
  CHECK(r.messages[4].tool_call_id == "t1");
  CHECK(r.messages[2].content == "Hello\nworld");  // text parts joined by "\n", as vLLM flattens them
  CHECK(r.messages[2].name == "bob");
  CHECK(r.messages[3].content.empty());
  CHECK(r.messages[4].role == "tool");
  CHECK_FALSE(r.params.max_tokens.has_value());  // chat: up to the context by default
  CHECK(r.add_generation_prompt);
  CHECK_FALSE(r.logprobs);
  CHECK_FALSE(r.params.logprobs.has_value());
}

TEST_CASE("chat: custom roles go to the template") {
  auto r = chat_ok(R"({"messages":[{"role":"wizard","content":"hi"},{"role":"user","content":"x"}]})");
  CHECK(r.messages[0].role == "wizard");
}

TEST_CASE("chat: logprobs and top_logprobs and max_completion_tokens and add_generation_prompt") {
  auto r = chat_ok(R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":3,
    "max_tokens":5,"max_completion_tokens":9,"add_generation_prompt":false,"stream":true,
    "stream_options":{"include_usage":false}})");
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 3);
  CHECK(r.params.logprobs == 3);
  CHECK(r.params.max_tokens == 9);  // max_completion_tokens wins
  CHECK_FALSE(r.add_generation_prompt);
  CHECK(r.stream);
  CHECK_FALSE(r.include_usage);

  auto m = chat_ok(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"logprobs":true})");
  CHECK(m.params.max_tokens == 5);
  CHECK(m.params.logprobs == 0);
}

TEST_CASE("wrong JSON types name the field") {
  struct bad_case {
    const char* body;
    const char* param;
    const char* message;
  };
  const bad_case cases[] = {
      {R"({"prompt":"x","temperature":"hot"})", "temperature", "temperature must be a number, got a string"},
      {R"({"prompt":"x","max_tokens":1.5})", "max_tokens", "max_tokens must be an integer, got 1.5"},
      {R"({"prompt":"x","max_tokens":"3"})", "max_tokens", "max_tokens must be an integer, got a string"},
      {R"({"prompt":"x","n":true})", "n", "n must be an integer, got a boolean"},
      {R"({"prompt":"x","stream":1})", "stream", "stream must be a boolean, got an integer"},
      {R"({"prompt":"x","stop":5})", "stop", "stop must be a string or a list of strings, got an integer"},
      {R"({"prompt":"x","stop":["a",1]})", "stop", "stop must be a string, got an integer"},
      {R"({"prompt":"x","stop_token_ids":"2"})", "stop_token_ids", "stop_token_ids must be an array, got a string"},
      {R"({"prompt":"x","model":3})", "model", "model must be a string, got an integer"},
      {R"({"prompt":"x","user":{}})", "user", "user must be a string, got an object"},
      {R"({"prompt":"x","stream":true,"stream_options":true})", "stream_options",
       "stream_options must be an object, got a boolean"},
      {R"({"prompt":"x","stream":true,"stream_options":{"include_usage":"yes"}})", "stream_options.include_usage",
       "stream_options.include_usage must be a boolean, got a string"},
      {R"({"prompt":{"text":"x"}})", "prompt",
       "prompt must be a string, a list of strings, a list of token ids or a list of token id lists, got an object"},
      {R"({"prompt":["a",1]})", "prompt",
       "prompt must be a string, a list of strings, a list of token ids or a list of token id lists, got a list "
       "mixing strings and an integer"},
      {R"({"prompt":[1,"a"]})", "prompt",
       "prompt must be a string, a list of strings, a list of token ids or a list of token id lists, got a list "
       "holding a string"},
      {R"({"prompt":[[1],2]})", "prompt",
       "prompt must be a string, a list of strings, a list of token ids or a list of token id lists, got a list "
       "mixing lists and an integer"},
      {R"({"prompt":"x","seed":"1"})", "seed", "seed must be an integer, got a string"},
      {R"({"prompt":"x","ignore_eos":"true"})", "ignore_eos", "ignore_eos must be a boolean, got a string"},
      {R"({"prompt":"x","priority":1e20})", "priority", "priority is out of range: 1e+20"},
      {R"({"prompt":"x","max_tokens":99999999999})", "max_tokens",
       "max_tokens must be in [-2147483648, 2147483647], got 99999999999"},
      {R"({"prompt":"x","n":18446744073709551615,"seed":1})", "n", "n is out of range: 18446744073709551615"},
      {R"({"prompt":"x","seed":18446744073709551615})", "seed",
       "seed must be a 64-bit signed integer (in [-9223372036854775808, 9223372036854775807]), got "
       "18446744073709551615"},
      {R"({"prompt":"x","logit_bias":{"1":200}})", "logit_bias",
       "logit_bias values must be in [-100, 100], got 200 for token 1"},
      {R"({"prompt":"x","logit_bias":{"a":2}})", "logit_bias", "logit_bias keys must be token ids, got 'a'"},
      {R"({"prompt":"x","prompt_embeds":"AAAA"})", "prompt_embeds",
       "prompt_embeds is not supported by this server (completions): prompt embeddings are not supported"},
      {R"({"prompt":"x","response_format":{"type":"sound"}})", "response_format.type",
       "response_format.type must be one of text, json_object or json_schema, got 'sound'"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.body);
    auto e = completion_error(c.body);
    CHECK(e.status == 400);
    CHECK(e.type == "BadRequestError");
    CHECK(e.param == c.param);
    CHECK(e.message == c.message);
  }
}

TEST_CASE("out-of-range values name the field and the value") {
  struct bad_case {
    const char* body;
    const char* param;
    const char* message;
  };
  const bad_case cases[] = {
      {R"({"prompt":"x","temperature":-1})", "temperature", "temperature must be a finite number >= 0, got -1"},
      {R"({"prompt":"x","top_p":0})", "top_p", "top_p must be in (0, 1], got 0"},
      {R"({"prompt":"x","top_p":1.5})", "top_p", "top_p must be in (0, 1], got 1.5"},
      {R"({"prompt":"x","top_k":-2})", "top_k", "top_k must be -1 or 0 (off) or at least 1, got -2"},
      {R"({"prompt":"x","min_p":2})", "min_p", "min_p must be in [0, 1], got 2"},
      {R"({"prompt":"x","n":0})", "n", "n must be at least 1, got 0"},
      {R"({"prompt":"x","presence_penalty":3})", "presence_penalty", "presence_penalty must be in [-2, 2], got 3"},
      {R"({"prompt":"x","frequency_penalty":-2.5})", "frequency_penalty",
       "frequency_penalty must be in [-2, 2], got -2.5"},
      {R"({"prompt":"x","repetition_penalty":0})", "repetition_penalty",
       "repetition_penalty must be a finite number > 0, got 0"},
      {R"({"prompt":"x","max_tokens":0})", "max_tokens", "max_tokens must be at least 1, got 0"},
      {R"({"prompt":"x","min_tokens":-1})", "min_tokens", "min_tokens must be at least 0, got -1"},
      {R"({"prompt":"x","min_tokens":5,"max_tokens":2})", "min_tokens",
       "min_tokens (5) must not exceed max_tokens (2)"},
      {R"({"prompt":"x","logprobs":21})", "logprobs", "logprobs must be in [0, 20], got 21"},
      {R"({"prompt":"x","logprobs":-1})", "logprobs", "logprobs must be in [0, 20], got -1"},
      {R"({"prompt":"x","stop":[""]})", "stop", "stop strings must not be empty"},
      {R"({"prompt":"x","stop_token_ids":[-4]})", "stop_token_ids", "stop_token_ids must be token ids (>= 0), got -4"},
      {R"({"prompt":[-1]})", "prompt", "prompt token ids must be in [0, 2147483647], got -1"},
      {R"({"prompt":"x","echo":true,"logprobs":1,"stream":true})", "echo",
       "echo with logprobs is not supported with stream: true (the prompt's logprobs come with the whole response)"},
      {R"({"prompt":"x","prompt_logprobs":1,"stream":true})", "prompt_logprobs",
       "prompt_logprobs is not supported with stream: true (they come with the whole response)"},
      {R"({"prompt":"x","prompt_logprobs":21})", "prompt_logprobs", "prompt_logprobs must be in [0, 20], got 21"},
      {R"({"prompt":"x","prompt_logprobs":-1})", "prompt_logprobs", "prompt_logprobs must be in [0, 20], got -1"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.body);
    auto e = completion_error(c.body);
    CHECK(e.status == 400);
    CHECK(e.param == c.param);
    CHECK(e.message == c.message);
  }
}

TEST_CASE("empty and missing prompts are refused") {
  for (const char* body : {R"({"prompt":""})", R"({"prompt":[]})", R"({"prompt":[[]]})", R"({"prompt":["a",""]})",
                           R"({"prompt":[[1],[]]})"}) {
    CAPTURE(body);
    auto e = completion_error(body);
    CHECK(e.param == "prompt");
    CHECK(e.message == "prompt must not be empty");
  }
  auto e = completion_error(R"({"model":"m"})");
  CHECK(e.param == "prompt");
  CHECK(e.message == "prompt is required");
  e = completion_error(R"({"prompt":null})");
  CHECK(e.message == "prompt is required");
}

TEST_CASE("stream_options without stream is refused with vLLM's message") {
  for (const char* body : {R"({"prompt":"x","stream_options":{"include_usage":true}})",
                           R"({"prompt":"x","stream":false,"stream_options":{}})"}) {
    auto e = completion_error(body);
    CHECK(e.param == "stream_options");
    CHECK(e.message == "Stream options can only be defined when `stream=True`.");
  }
  auto c = chat_error(R"({"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}})");
  CHECK(c.param == "stream_options");
}

TEST_CASE("chat: bad messages name the message and the field") {
  struct bad_case {
    const char* body;
    const char* param;
    const char* message;
  };
  const bad_case cases[] = {
      {R"({"model":"m"})", "messages", "messages is required"},
      {R"({"messages":[]})", "messages", "messages must not be empty"},
      {R"({"messages":"hi"})", "messages", "messages must be an array, got a string"},
      {R"({"messages":[42]})", "messages[0]", "messages[0] must be an object, got an integer"},
      {R"({"messages":[{"content":"hi"}]})", "messages[0].role", "messages[0].role is required"},
      {R"({"messages":[{"role":"user","content":"a"},{"role":"","content":"hi"}]})", "messages[1].role",
       "messages[1].role must not be empty"},
      {R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"sometimes"})", "tool_choice",
       "tool_choice must be \"none\", \"auto\", \"required\" or a named function, got 'sometimes'"},
      {R"({"messages":[{"role":"user","content":"hi"}],"cache_salt":""})", "cache_salt",
       "cache_salt must be a non-empty string (leave it out for no salt)"},
      {R"({"messages":[{"role":7,"content":"hi"}]})", "messages[0].role",
       "messages[0].role must be a string, got an integer"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content", "messages[0].content is required"},
      {R"({"messages":[{"role":"user","content":null}]})", "messages[0].content",
       "messages[0].content must not be null for role 'user'"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content",
       "messages[0].content must be a string or a list of content parts, got an integer"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]})",
       "messages[0].content[0].type",
       "Only text content parts are supported; messages[0].content[0] has type 'image_url'"},
      {R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_audio"}]}]})",
       "messages[0].content[1].type",
       "Only text content parts are supported; messages[0].content[1] has type 'input_audio'"},
      {R"({"messages":[{"role":"user","content":[{"text":"a"}]}]})", "messages[0].content[0].type",
       "messages[0].content[0].type is required"},
      {R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", "messages[0].content[0].text",
       "messages[0].content[0].text is required"},
      {R"({"messages":[{"role":"user","content":["hi"]}]})", "messages[0].content[0]",
       "messages[0].content[0] must be an object, got a string"},
      {R"({"messages":[{"role":"user","content":"hi","name":1}]})", "messages[0].name",
       "messages[0].name must be a string, got an integer"},
      {R"({"messages":[{"role":"user","content":"hi"}],"logprobs":1})", "logprobs",
       "logprobs must be a boolean, got an integer"},
      {R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":2})", "top_logprobs",
       "when using `top_logprobs`, `logprobs` must be set to true."},
      {R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21})", "top_logprobs",
       "top_logprobs must be in [-1, 20], got 21"},
      {R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":-2})", "top_logprobs",
       "top_logprobs must be in [-1, 20], got -2"},
      {R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"auto"})", "tool_choice",
       "When using `tool_choice`, `tools` must be set (tool_choice \"auto\" was given without tools)."},
      {R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"function","function":{"name":"f"}}})",
       "tool_choice",
       "When using `tool_choice`, `tools` must be set (tool_choice \"function\" was given without tools)."},
      {R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0})", "max_completion_tokens",
       "max_tokens must be at least 1, got 0"},
      {R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":-5})", "max_tokens",
       "max_tokens must be at least 1, got -5"},
      {R"({"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":"no"})", "add_generation_prompt",
       "add_generation_prompt must be a boolean, got a string"},
      {R"({"messages":[{"role":"user","content":"hi"}],"temperature":-0.5})", "temperature",
       "temperature must be a finite number >= 0, got -0.5"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.body);
    auto e = chat_error(c.body);
    CHECK(e.status == 400);
    CHECK(e.param == c.param);
    CHECK(e.message == c.message);
  }
}

TEST_CASE("malformed bodies: invalid JSON or not an object or bad UTF-8 or too deep or too large") {
  auto e = completion_error(R"({"prompt": "x",)");
  CHECK(e.status == 400);
  CHECK(e.param.empty());
  CHECK(e.message.rfind("Invalid JSON: ", 0) == 0);

  e = completion_error("");
  CHECK(e.message == "Request body is empty; expected a JSON object");
  e = completion_error("[1,2]");
  CHECK(e.message == "Request body must be a JSON object, got an array");
  e = completion_error("\"prompt\"");
  CHECK(e.message == "Request body must be a JSON object, got a string");

  // A lone continuation byte inside a string, and an overlong encoding of '/'.
  e = completion_error("{\"prompt\":\"ab\x80\"}");
  CHECK(e.status == 400);
  CHECK(e.message == "Request body is not valid UTF-8 (invalid byte at offset 13)");
  e = chat_error("{\"messages\":[{\"role\":\"user\",\"content\":\"\xC0\xAF\"}]}");
  CHECK(e.message.find("not valid UTF-8") != std::string::npos);
  // Escaped surrogates that do not pair are invalid too (simdjson's string check).
  e = completion_error(R"({"prompt":"\ud800"})");
  CHECK(e.status == 400);
  CHECK(e.message.rfind("Invalid JSON: ", 0) == 0);

  std::string deep = R"({"prompt":"x","extra":)" + std::string(40, '[') + std::string(40, ']') + "}";
  e = completion_error(deep);
  CHECK(e.status == 400);
  CHECK(e.message == "Invalid JSON: nested deeper than 32 levels");
  // The same depth passes with a larger limit: the limit, not the content, refused it.
  CHECK(parse_completion_request(deep, parse_limits{1u << 20, 64}).has_value());

  std::string big = R"({"prompt":")" + std::string(2000, 'a') + R"("})";
  auto r = parse_completion_request(big, parse_limits{1000, 32});
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().status == 413);
  CHECK(r.error().message == "Request body of 2013 bytes exceeds the limit of 1000 bytes");
  CHECK(parse_completion_request(big).has_value());
}

TEST_CASE("valid multi-byte UTF-8 passes through unchanged") {
  auto r = completion_ok("{\"prompt\":\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"}");
  CHECK(r.prompts[0].text() == "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  auto e = completion_ok(R"({"prompt":"\u00e9\ud83d\ude00"})");
  CHECK(e.prompts[0].text() == "\xC3\xA9\xF0\x9F\x98\x80");
}

TEST_CASE("the engine's context-length refusal is worded as vLLM words it") {
  auto e = context_length_error(100, 500, 512);
  CHECK(e.status == 400);
  CHECK(e.param == "max_tokens");
  CHECK(e.message ==
        "This model's maximum context length is 512 tokens. However, you requested 600 tokens (100 in the "
        "messages, 500 in the completion). Please reduce the length of the messages or completion.");
  // Exactly full, with max_tokens: the total is what is too long.
  CHECK(context_length_error(512, 1, 512).param == "max_tokens");

  e = context_length_error(512, std::nullopt, 512);
  CHECK(e.status == 400);
  CHECK(e.param == "input_tokens");
  CHECK(e.message ==
        "This model's maximum context length is 512 tokens. However, your request has 512 input tokens. Please "
        "reduce the length of the input messages.");
  // A prompt longer than the context alone is blamed, max_tokens or not.
  CHECK(context_length_error(600, 10, 512).param == "input_tokens");
}

TEST_CASE("model resolution: the default model or a served name or a 404 for others") {
  const std::vector<std::string> served{"stories260K", "alias"};
  auto r = resolve_model("", served);
  REQUIRE(r.has_value());
  CHECK(*r == "stories260K");
  r = resolve_model("alias", served);
  REQUIRE(r.has_value());
  CHECK(*r == "alias");
  r = resolve_model("gpt-4", served);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().status == 404);
  CHECK(r.error().param == "model");
  CHECK(r.error().message == "The model `gpt-4` does not exist.");
  CHECK(resolve_model("", std::vector<std::string>{}).error().status == 503);
}

TEST_CASE(
    "request limits: n is checked first, each list's count before its entries are read, each a 400 naming "
    "field and flag") {
  // n over max_num_seqs, whatever else the body holds (here too many stop strings, listed first).
  std::string stops = "[";
  for (int i = 0; i < 500; ++i) {
    if (i > 0)
      stops += ',';
    stops += "\"s\"";
  }
  stops += ']';
  for (const std::string n : {"257", "10000000", "2147483647"}) {
    auto r = parse_completion_request(R"({"prompt":"p","stop":)" + stops + R"(,"n":)" + n + "}");
    REQUIRE_FALSE(r);
    CHECK(r.error().status == 400);
    CHECK(r.error().param == "n");
    CHECK(r.error().message == "n: " + n + " sequences, more than --max-num-seqs (256) can run at once");
  }
  auto big_n = parse_chat_request(R"({"messages":[{"role":"user","content":"u"}],"n":1000})", {.max_n = 999});
  REQUIRE_FALSE(big_n);
  CHECK(big_n.error().param == "n");
  CHECK(parse_completion_request(R"({"prompt":"p","n":256})").has_value());
  // The defaults.
  auto stop = parse_completion_request(R"({"prompt":"p","stop":)" + stops + "}");
  REQUIRE_FALSE(stop);
  CHECK(stop.error().message == "stop: 500 stop strings, more than --max-stop-strings (128)");
  auto bytes = parse_completion_request(R"({"prompt":"p","stop":")" + std::string(16385, 'x') + R"("})");
  REQUIRE_FALSE(bytes);
  CHECK(bytes.error().param == "stop");
  CHECK(bytes.error().message == "stop: 16385 bytes of stop strings, more than --max-stop-bytes (16384)");
  CHECK(parse_completion_request(R"({"prompt":"p","stop":")" + std::string(16384, 'x') + R"("})").has_value());
  // A list of token ids is one prompt, however long; a list of lists is counted.
  std::string ids = "[";
  for (int i = 0; i < 2000; ++i) {
    if (i > 0)
      ids += ',';
    ids += "[1]";
  }
  ids += ']';
  auto prompts = parse_completion_request(R"({"prompt":)" + ids + "}");
  REQUIRE_FALSE(prompts);
  CHECK(prompts.error().param == "prompt");
  CHECK(prompts.error().message == "prompt: 2000 prompts, more than --max-prompts-per-request (1024)");
  CHECK(parse_completion_request(R"({"prompt":[1,1,1,1,1,1,1,1,1,1]})", {.max_prompts = 1}).has_value());
}

TEST_CASE("logprob_token_ids: the listed ids replace the top logprobs, need logprobs, and are bounded") {
  auto c = completion_ok(R"({"prompt":"x","logprobs":3,"logprob_token_ids":[5,0,5]})");
  CHECK(c.params.logprob_token_ids == std::vector<int32_t>{5, 0, 5});
  CHECK(c.params.logprobs == 3);  // the engine reports the listed ids instead of the top 3
  // Chat: they take precedence over top_logprobs, whose count the engine then does not compute.
  auto h = chat_ok(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":4,)"
                   R"("logprob_token_ids":[7,2.0]})");
  CHECK(h.params.logprob_token_ids == std::vector<int32_t>{7, 2});
  CHECK(h.params.logprobs == 0);
  CHECK(h.top_logprobs == 4);
  // vLLM's errors and its bound of 128 ids.
  std::string many = R"({"prompt":"x","logprobs":0,"logprob_token_ids":[)";
  for (int i = 0; i < 129; ++i) {
    if (i > 0)
      many += ',';
    many += std::to_string(i);
  }
  many += "]}";
  struct bad_case {
    std::string body;
    const char* message;
  };
  const bad_case cases[] = {
      {R"({"prompt":"x","logprob_token_ids":[1]})", "when using `logprob_token_ids`, `logprobs` must be set."},
      {R"({"prompt":"x","logprobs":0,"logprob_token_ids":[]})", "`logprob_token_ids` must not be an empty list."},
      {R"({"prompt":"x","logprobs":0,"logprob_token_ids":[-1]})",
       "logprob_token_ids must be in [0, 2147483647], got -1"},
      {R"({"prompt":"x","logprobs":0,"logprob_token_ids":["a"]})",
       "logprob_token_ids must be an integer, got a string"},
      {R"({"prompt":"x","logprobs":0,"logprob_token_ids":3})", "logprob_token_ids must be an array, got an integer"},
      {R"({"prompt":"x","logprobs":1,"echo":true,"max_tokens":0,"logprob_token_ids":[1]})",
       "`logprob_token_ids` is not supported when `echo=True` and `max_tokens=0` because no output tokens are "
       "generated."},
      {many, "Requested logprob_token_ids of length 129, which is greater than max allowed: 128"},
  };
  for (const auto& bad : cases) {
    CAPTURE(bad.body);
    auto e = completion_error(bad.body);
    CHECK(e.status == 400);
    CHECK(e.param == "logprob_token_ids");
    CHECK(e.message == bad.message);
  }
  auto e = chat_error(R"({"messages":[{"role":"user","content":"x"}],"logprob_token_ids":[1]})");
  CHECK(e.param == "logprob_token_ids");
  CHECK(e.message == "when using `logprob_token_ids`, `logprobs` must be set to true.");
  // The limit is the parser's: a smaller one refuses fewer ids.
  parse_limits small;
  small.max_logprob_token_ids = 2;
  auto r = parse_completion_request(R"({"prompt":"x","logprobs":0,"logprob_token_ids":[1,2,3]})", small);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message == "Requested logprob_token_ids of length 3, which is greater than max allowed: 2");
}

TEST_CASE("batch chat: messages is a list of conversations, every other field applies to each") {
  auto r = parse_chat_batch_request(
      R"({"model":"m","messages":[[{"role":"user","content":"a"}],)"
      R"([{"role":"system","content":"s"},{"role":"user","content":"b"}]],)"
      R"("max_tokens":4,"temperature":0,"echo":true,"logprobs":true,"top_logprobs":2,"return_token_ids":true,)"
      R"("response_format":{"type":"json_object"},"tool_choice":"none","n":1})");
  REQUIRE_MESSAGE(r.has_value(), r.error().message);
  REQUIRE(r->conversations.size() == 2);
  CHECK(r->conversations[0].size() == 1);
  CHECK(r->conversations[1][1].content == "b");
  CHECK(r->messages.empty());
  CHECK(r->params.max_tokens == 4);
  CHECK(r->params.logprobs == 2);
  CHECK(r->echo);
  CHECK(r->return_token_ids);
  CHECK(r->structured_param == "response_format");
  // The same fields parse as a chat request's do.
  auto single = parse_chat_request(
      R"({"messages":[{"role":"user","content":"a"}],"max_tokens":4,"logprobs":true,"logprob_token_ids":[3]})");
  auto batch = parse_chat_batch_request(
      R"({"messages":[[{"role":"user","content":"a"}]],"max_tokens":4,"logprobs":true,"logprob_token_ids":[3]})");
  REQUIRE(single.has_value());
  REQUIRE(batch.has_value());
  CHECK(static_cast<const chat_request&>(*batch).params == single->params);
}

TEST_CASE("batch chat: errors name the conversation, and what vLLM's batch endpoint refuses is refused by name") {
  struct bad_case {
    const char* body;
    const char* param;
    const char* message;
  };
  const bad_case cases[] = {
      {R"({"model":"m"})", "messages", "messages is required"},
      {R"({"messages":[]})", "messages", "messages must not be empty"},
      {R"({"messages":[[{"role":"user","content":"a"}],[]]})", "messages[1]", "messages[1] must not be empty"},
      {R"({"messages":[{"role":"user","content":"a"}]})", "messages[0]",
       "messages[0] must be a list of messages (one conversation), got an object (a single conversation goes to "
       "/v1/chat/completions)"},
      {R"({"messages":[[{"role":"user","content":"a"}],[{"content":"b"}]]})", "messages[1][0].role",
       "messages[1][0].role is required"},
      {R"({"messages":[[{"role":"user","content":"a"}],[{"role":"user","content":"b"},{"role":"user"}]]})",
       "messages[1][1].content", "messages[1][1].content is required"},
      {R"({"messages":[[{"role":"user","content":[{"type":"image_url"}]}]]})", "messages[0][0].content[0].type",
       "Only text content parts are supported; messages[0][0].content[0] has type 'image_url'"},
      {R"({"messages":[[{"role":"user","content":"a"}]],"stream":true})", "stream",
       "Batch chat completions do not support streaming (as vLLM's /v1/chat/completions/batch): leave stream out or "
       "false, or stream each conversation from /v1/chat/completions."},
      {R"({"messages":[[{"role":"user","content":"a"}]],"n":2})", "n",
       "Batch chat completions do not support `n > 1`. Please set `n` to 1."},
      {R"({"messages":[[{"role":"user","content":"a"}]],"tools":[{"type":"function","function":{"name":"f"}}]})",
       "tools",
       "Batch chat completions do not support tool use (as vLLM's /v1/chat/completions/batch): leave tools out, or "
       "send each conversation to /v1/chat/completions."},
      {R"({"messages":[[{"role":"user","content":"a"}]],"tool_choice":"required"})", "tool_choice",
       "Batch chat completions support only tool_choice \"none\", got \"required\"."},
      {R"({"messages":[[{"role":"user","content":"a"}]],"prompt_logprobs":1})", "prompt_logprobs",
       "prompt_logprobs is not supported by batch chat completions: a chat response carries the prompt_logprobs of "
       "one conversation (send each conversation to /v1/chat/completions)."},
      {R"({"messages":[[{"role":"user","content":"a"}]],"logprob_token_ids":[1]})", "logprob_token_ids",
       "when using `logprob_token_ids`, `logprobs` must be set to true."},
  };
  for (const auto& c : cases) {
    CAPTURE(c.body);
    auto e = error_of(parse_chat_batch_request(c.body));
    CHECK(e.status == 400);
    CHECK(e.param == c.param);
    CHECK(e.message == c.message);
  }
  // More conversations than --max-prompts-per-request, counted before any is read.
  parse_limits small;
  small.max_prompts = 2;
  auto e = error_of(parse_chat_batch_request(R"({"messages":[[1],[2],[3]]})", small));
  CHECK(e.param == "messages");
  CHECK(e.message == "messages: 3 conversations, more than --max-prompts-per-request (2)");
  // A list of conversations sent to /v1/chat/completions is pointed at the batch endpoint.
  e = chat_error(R"({"messages":[[{"role":"user","content":"a"}]]})");
  CHECK(e.param == "messages[0]");
  CHECK(e.message ==
        "messages[0] must be an object, got an array (a list of conversations goes to "
        "/v1/chat/completions/batch)");
}
