// A vLLM user's launch line and requests against the real binary: vLLM's serve flags start the server (those with
// no meaning here logged as such), VLLM_API_KEY guards it, --root-path and --max-logprobs act, and requests are
// validated as vLLM validates them (Content-Type, refused fields named in the 400).
#include "server_harness.hpp"

#include <string>

using namespace actorllm::e2e;

namespace {

std::string error_param(const http_reply& r) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  if (parser.parse(r.body).get(e) != simdjson::SUCCESS)
    return "<not JSON>";
  std::string_view p;
  if (e["error"]["param"].get(p) != simdjson::SUCCESS)
    return "<null>";
  return std::string{p};
}

}  // namespace

TEST_CASE("serve starts with a launch line of vLLM flags, and VLLM_API_KEY guards it") {
  server s{{"--trust-remote-code",
            "--disable-frontend-multiprocessing",
            "--enforce-eager",
            "--max-logprobs",
            "5",
            "--root-path",
            "/api",
            "--chat-template-content-format",
            "string",
            "--enable-prompt-tokens-details",
            "--tool-call-parser",
            "hermes",
            "--enable-auto-tool-choice",
            "--swap-space",
            "4",
            "--tokenizer-mode",
            "auto",
            "--uvicorn-log-level",
            "info",
            "--disable-log-requests",
            "--kv-cache-dtype",
            "auto",
            "--scheduling-policy",
            "fcfs",
            "--return-tokens-as-token-ids"},
           {"VLLM_API_KEY=vk"}};
  const std::string log = s.log();
  CHECK(log.find("--trust-remote-code has no effect here") != std::string::npos);
  CHECK(log.find("--swap-space 4 has no effect here") != std::string::npos);
  const std::string auth = "Authorization: Bearer vk";
  const std::string req = R"({"prompt":"Once upon a time","max_tokens":2,"logprobs":1})";
  check_openai_error(http(s.port(), "POST", "/v1/completions", req), 401);
  auto ok = http(s.port(), "POST", "/v1/completions", req, {auth});
  CHECK_MESSAGE(ok.status == 200, ok.body);
  CHECK(ok.body.find("token_id:") != std::string::npos);  // --return-tokens-as-token-ids
  // --root-path: the prefix a proxy leaves on the path is taken off.
  CHECK(http(s.port(), "POST", "/api/v1/completions", req, {auth}).status == 200);
  // --max-logprobs 5
  auto many =
      http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":2,"logprobs":6})", {auth});
  check_openai_error(many, 400);
  CHECK(error_param(many) == "logprobs");
}

TEST_CASE("vLLM flags that ask for what this engine does not do stop it with a message naming the flag") {
  const std::string model = actorllm::test::model_dir("stories260K").string();
  auto r = actorllm::test::run_command(actorllm::test::actorllm_binary().string() + " serve " + model +
                                       " --port 0 --quantization awq 2>&1");
  CHECK(r.status != 0);
  CHECK(r.out.find("--quantization awq: not supported here") != std::string::npos);
  auto unknown = actorllm::test::run_command(actorllm::test::actorllm_binary().string() + " serve " + model +
                                             " --port 0 --max-num-seqz 4 2>&1");
  CHECK(unknown.status == 2);
  CHECK(unknown.out.find("did you mean --max-num-seqs?") != std::string::npos);
}

TEST_CASE("requests are validated as vLLM validates them") {
  server s;
  const std::string ok_body = R"({"prompt":"Once upon a time","max_tokens":2})";
  // A body not declared JSON.
  auto plain = http(s.port(), "POST", "/v1/completions", ok_body, {"Content-Type: text/plain"});
  check_openai_error(plain, 400);
  CHECK(plain.body.find("application/json") != std::string::npos);
  // Fields that are not implemented are refused by name, never dropped.
  struct refused_case {
    std::string target, body, param;
  };
  const refused_case cases[] = {
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"1":5}})", "logit_bias"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"sound"}})",
       "response_format.type"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"maybe"})", "tool_choice"},
      {"/v1/completions", R"({"prompt":"x","seed":18446744073709551615})", "seed"},
      {"/v1/completions", R"({"prompt":"x","cache_salt":""})", "cache_salt"},
      {"/v1/completions", R"({"prompt":"x","suffix":"y"})", "suffix"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.body);
    auto r = http(s.port(), "POST", c.target, c.body);
    check_openai_error(r, 400);
    CHECK(error_param(r) == c.param);
  }
  // /tokenize honours add_special_tokens; custom roles reach the template (stories260K's template: role names).
  auto with = http(s.port(), "POST", "/tokenize", R"({"prompt":"Once upon a time","add_special_tokens":true})");
  auto without = http(s.port(), "POST", "/tokenize", R"({"prompt":"Once upon a time","add_special_tokens":false})");
  REQUIRE(with.status == 200);
  REQUIRE(without.status == 200);
  simdjson::dom::parser p1, p2;
  const auto n_with = int64_t(p1.parse(with.body)["count"]);
  const auto n_without = int64_t(p2.parse(without.body)["count"]);
  CHECK(n_with == n_without + 1);  // the bos token
  auto custom = http(s.port(), "POST", "/v1/chat/completions",
                     R"({"messages":[{"role":"narrator","content":"Once"}],"max_tokens":2})");
  CHECK_MESSAGE(custom.status == 200, custom.body);
}
