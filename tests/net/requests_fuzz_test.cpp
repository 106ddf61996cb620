// Randomized inputs for the request parsers: random bytes and mutated valid bodies must always end in a request or
// an api_error with a 4xx status, never a crash, a hang or an escaping exception. Tagged [asan]: CI runs it under
// ASan+UBSan.
#include <doctest/doctest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "net/openai/requests.hpp"

using namespace actorllm::net::openai;

namespace {

const std::vector<std::string> seeds = {
    R"({"model":"m","prompt":"Once upon a time","max_tokens":8,"temperature":0.7,"top_p":0.9,"top_k":5,)"
    R"("stop":["\n","END"],"stream":true,"stream_options":{"include_usage":true},"logprobs":2,"seed":1})",
    R"({"prompt":[[1,2,3],[4,5]],"n":2,"stop_token_ids":[2],"echo":false,"min_tokens":1,"priority":3})",
    R"({"prompt":["a","b"],"presence_penalty":0.1,"frequency_penalty":0.2,"repetition_penalty":1.05,"user":"u"})",
    R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text",)"
    R"("text":"hi"}]}],"logprobs":true,"top_logprobs":2,"max_completion_tokens":4,"add_generation_prompt":true})",
    R"({"messages":[{"role":"assistant","content":null},{"role":"user","content":"x\u00e9"}],"stream":false})",
    // Structured outputs, stop lists, token-id lists, tools and template variables: the fields whose sizes are
    // limited (and the limits' own paths, with the small limits below).
    R"({"prompt":"p","stop":["a","bb","ccc","dddd"],"response_format":{"type":"json_schema","json_schema":)"
    R"({"name":"x","schema":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string",)"
    R"("pattern":"[a-z]+"}},"required":["a"]}}},"logit_bias":{"1":-100,"2":5},"allowed_token_ids":[1,2,3]})",
    R"({"prompt":["x","y","z"],"n":3,"structured_outputs":{"regex":"(ab|cd){1,3}"},"bad_words":["no","never"]})",
    R"({"prompt":[[1],[2],[3],[4]],"guided_choice":["yes","no"],"stop":"END","stop_token_ids":[5,6]})",
    R"({"prompt":"p","guided_json":{"type":"array","items":{"enum":[1,"a",null]},"maxItems":3}})",
    R"({"messages":[{"role":"user","content":"w"}],"tools":[{"type":"function","function":{"name":"f",)"
    R"("parameters":{"type":"object","properties":{"x":{"type":"number"}}}}},{"type":"function","function":)"
    R"({"name":"g"}}],"tool_choice":"required","chat_template_kwargs":{"a":1,"b":[true],"c":{"d":"e"}},)"
    R"("documents":[{"title":"t"}],"reasoning_effort":"low","stop":["x","y"],"n":2})",
    R"({"messages":[{"role":"user","content":"w"}],"tools":[{"type":"function","function":{"name":"f"}}],)"
    R"("tool_choice":{"type":"function","function":{"name":"f"}},"stop":["}"],"parallel_tool_calls":false})",
};

const std::vector<std::string> fragments = {"{",
                                            "}",
                                            "[",
                                            "]",
                                            ",",
                                            ":",
                                            "\"",
                                            "null",
                                            "true",
                                            "false",
                                            "-1",
                                            "1e309",
                                            "0.5",
                                            "[[",
                                            "]]",
                                            "\\u",
                                            "\\ud800",
                                            "\xC3",
                                            "\xFF",
                                            "\x80",
                                            "\"prompt\"",
                                            "\"messages\"",
                                            "[]",
                                            "{}",
                                            "\"\"",
                                            "99999999999999999999",
                                            "-0",
                                            "1.0",
                                            "\"role\"",
                                            "\"content\"",
                                            "\"stream\"",
                                            "\"n\":9",
                                            "\"x\",\"y\",",
                                            "{\"type\":\"function\",\"function\":{\"name\":\"h\"}},",
                                            "\"k\":1,",
                                            "\"stop\":[\"s\"],"};

std::string mutate(std::string s, std::mt19937& gen) {
  std::uniform_int_distribution<int> op_dist{0, 4};
  int n_ops = 1 + static_cast<int>(gen() % 4);
  for (int k = 0; k < n_ops && !s.empty(); ++k) {
    std::size_t pos = gen() % (s.size() + 1);
    switch (op_dist(gen)) {
      case 0:  // flip a byte
        if (pos < s.size())
          s[pos] = static_cast<char>(gen() & 0xFF);
        break;
      case 1:  // delete a span
        s.erase(std::min(pos, s.size()), gen() % 8);
        break;
      case 2:  // insert a JSON-ish fragment
        s.insert(pos, fragments[gen() % fragments.size()]);
        break;
      case 3:  // duplicate a span
        if (pos < s.size())
          s.insert(pos, s.substr(pos, gen() % 16));
        break;
      case 4:  // truncate
        s.resize(pos);
        break;
    }
  }
  return s;
}

template <class Result>
void check_outcome(const Result& r, const std::string& body, int& parsed) {
  if (r.has_value()) {
    ++parsed;
    return;
  }
  CAPTURE(body);
  const api_error& e = r.error();
  CHECK((e.status == 400 || e.status == 413));
  CHECK_FALSE(e.message.empty());
}

}  // namespace

TEST_CASE("request parser fuzz: random bytes and mutated bodies give a request or an api_error [asan]") {
  std::mt19937 gen{20261122};
  int parsed = 0;
  int total = 0;
  // Small limits make the depth, size and count paths reachable too.
  const parse_limits limits{.max_body_bytes = 4096,
                            .max_depth = 16,
                            .max_n = 4,
                            .max_stop_strings = 5,
                            .max_stop_bytes = 12,
                            .max_prompts = 4,
                            .max_tools = 2,
                            .max_template_kwargs = 3,
                            .max_bad_words = 2};
  for (int iter = 0; iter < 20000; ++iter) {
    std::string body;
    if (iter % 4 == 0) {
      body.resize(gen() % 200);
      for (char& c : body)
        c = static_cast<char>(gen() & 0xFF);
    } else {
      body = mutate(seeds[gen() % seeds.size()], gen);
      if (iter % 50 == 0)
        body = std::string(gen() % 40, '[') + body;
    }
    check_outcome(parse_completion_request(body, limits), body, parsed);
    check_outcome(parse_chat_request(body, limits), body, parsed);
    total += 2;
  }
  // The valid seeds themselves parse (each with the endpoint it is for), so the loop above is not all errors.
  for (const std::string& seed : seeds) {
    CAPTURE(seed);
    if (seed.find("\"messages\"") == std::string::npos)
      CHECK(parse_completion_request(seed).has_value());
    else
      CHECK(parse_chat_request(seed).has_value());
  }
  CHECK(parsed > 0);
  CHECK(parsed < total);
}

namespace {

// Bodies with `k` entries in one limited field, built by appending (GCC 12 warns falsely on `"lit" + to_string`).
std::string limited_body(const std::string& field, std::size_t k) {
  auto item_list = [k](const std::string& open, const std::string& close) {
    std::string s = "[";
    for (std::size_t i = 0; i < k; ++i) {
      if (i > 0)
        s += ',';
      s += open;
      s += std::to_string(i % 10);
      s += close;
    }
    s += ']';
    return s;
  };
  const std::string chat_head = R"({"messages":[{"role":"user","content":"u"}],)";
  std::string body;
  if (field == "n") {
    body = R"({"prompt":"p","n":)";
    body += std::to_string(k);
  } else if (field == "stop strings") {
    body = R"({"prompt":"p","stop":)";
    body += item_list("\"", "\"");
  } else if (field == "stop bytes") {
    body = R"({"prompt":"p","stop":")";
    body += std::string(k, 'x');
    body += '"';
  } else if (field == "prompt") {
    body = R"({"prompt":)";
    body += item_list("\"p", "\"");
  } else if (field == "bad_words") {
    body = R"({"prompt":"p","bad_words":)";
    body += item_list("\"w", "\"");
  } else if (field == "tools") {
    body = chat_head;
    body += R"("tools":)";
    body += item_list(R"({"type":"function","function":{"name":"f)", R"("}})");
  } else {
    body = chat_head;
    body += R"("chat_template_kwargs":{)";
    for (std::size_t i = 0; i < k; ++i) {
      if (i > 0)
        body += ',';
      body += "\"k";
      body += std::to_string(i);
      body += "\":1";
    }
    body += '}';
  }
  body += '}';
  return body;
}

}  // namespace

TEST_CASE("request parser fuzz: lists around every count limit give the request or a 400 naming field and flag") {
  std::mt19937 gen{20261128};
  const parse_limits limits{.max_n = 8,
                            .max_stop_strings = 6,
                            .max_stop_bytes = 20,
                            .max_prompts = 5,
                            .max_tools = 4,
                            .max_template_kwargs = 3,
                            .max_bad_words = 4};
  struct field_case {
    std::string field;
    std::string param;
    std::string flag;
    std::size_t limit;
    bool chat;
  };
  const field_case cases[] = {
      {"n", "n", "--max-num-seqs", 8, false},
      {"stop strings", "stop", "--max-stop-strings", 6, false},
      {"stop bytes", "stop", "--max-stop-bytes", 20, false},
      {"prompt", "prompt", "--max-prompts-per-request", 5, false},
      {"bad_words", "bad_words", "--max-bad-words", 4, false},
      {"tools", "tools", "--max-tools", 4, true},
      {"chat_template_kwargs", "chat_template_kwargs", "--max-chat-template-kwargs", 3, true},
  };
  for (int iter = 0; iter < 400; ++iter) {
    const field_case& c = cases[gen() % std::size(cases)];
    const std::size_t k = 1 + gen() % (2 * c.limit + 2);
    const std::string body = limited_body(c.field, k);
    CAPTURE(body);
    std::optional<api_error> error;
    if (c.chat) {
      auto r = parse_chat_request(body, limits);
      if (!r)
        error = r.error();
    } else {
      auto r = parse_completion_request(body, limits);
      if (!r)
        error = r.error();
    }
    CHECK(error.has_value() == (k > c.limit));
    if (error) {
      CHECK(error->status == 400);
      CHECK(error->param == c.param);
      CHECK_MESSAGE(error->message.find(c.flag) != std::string::npos, error->message);
    }
  }
}
