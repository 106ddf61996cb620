// Randomized inputs for the request parsers: random bytes and mutated valid bodies must always end in a request or
// an api_error with a 4xx status, never a crash, a hang or an escaping exception. Tagged [asan]: CI runs it under
// ASan+UBSan.
#include <doctest/doctest.h>

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
};

const std::vector<std::string> fragments = {"{",          "}",
                                            "[",          "]",
                                            ",",          ":",
                                            "\"",         "null",
                                            "true",       "false",
                                            "-1",         "1e309",
                                            "0.5",        "[[",
                                            "]]",         "\\u",
                                            "\\ud800",    "\xC3",
                                            "\xFF",       "\x80",
                                            "\"prompt\"", "\"messages\"",
                                            "[]",         "{}",
                                            "\"\"",       "99999999999999999999",
                                            "-0",         "1.0",
                                            "\"role\"",   "\"content\"",
                                            "\"stream\""};

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
  // Small limits make the depth and size paths reachable too.
  const parse_limits limits{4096, 16};
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
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    CAPTURE(seeds[i]);
    if (i < 3)
      CHECK(parse_completion_request(seeds[i]).has_value());
    else
      CHECK(parse_chat_request(seeds[i]).has_value());
  }
  CHECK(parsed > 0);
  CHECK(parsed < total);
}
