// A vLLM user's launch line and requests against the real binary: vLLM's serve flags start the server (those with
// no meaning here logged as such), VLLM_API_KEY guards it, --root-path and --max-logprobs act, and requests are
// validated as vLLM validates them (Content-Type, refused fields named in the 400).
#include "server_harness.hpp"

#include <cmath>
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

// Whether two chat logprobs objects name the same tokens, each logprob (and each top logprob) within 1e-4 of the
// other's. A conversation batched with others can share a step with another's prompt, so that its rows go through
// the GEMM where alone they went through the GEMV: the same products summed in another order (vLLM does not promise
// batch-invariant numbers either).
void check_same_logprobs(simdjson::dom::element a, simdjson::dom::element b) {
  auto ca = a["content"].get_array().value(), cb = b["content"].get_array().value();
  REQUIRE(ca.size() == cb.size());
  auto same_entry = [](simdjson::dom::element x, simdjson::dom::element y) {
    CHECK(std::string_view(x["token"]) == std::string_view(y["token"]));
    CHECK(std::fabs(double(x["logprob"]) - double(y["logprob"])) <= 1e-4);
  };
  for (size_t i = 0; i < ca.size(); ++i) {
    CAPTURE(i);
    same_entry(ca.at(i), cb.at(i));
    auto ta = ca.at(i)["top_logprobs"].get_array().value(), tb = cb.at(i)["top_logprobs"].get_array().value();
    REQUIRE(ta.size() == tb.size());
    for (size_t j = 0; j < ta.size(); ++j)
      same_entry(ta.at(j), tb.at(j));
  }
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
  CHECK(log.find("--enforce-eager has no effect") == std::string::npos);  // a real flag now (no CUDA graphs)
  CHECK(log.find("--swap-space 4 has no effect here") != std::string::npos);
  const std::string auth = "Authorization: Bearer vk";
  const std::string req = R"({"prompt":"Once upon a time","max_tokens":2,"logprobs":1})";
  check_openai_error(http(s.port(), "POST", "/v1/completions", req), 401);
  check_openai_error(http(s.port(), "POST", "/invocations", req), 401);  // generation: guarded like /v1
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
  CHECK(r.out.find("--quantization awq: the checkpoint has no quantization_config") != std::string::npos);
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

namespace {

/// A token-id prompt of `n` ids (all "1", stories260K's bos: any id in the vocabulary does).
std::string id_prompt(std::size_t n) {
  std::string out{"["};
  for (std::size_t i = 0; i < n; ++i)
    out += i == 0 ? "1" : ",1";
  return out + "]";
}

std::string error_message(const http_reply& r) {
  simdjson::dom::parser parser;
  std::string_view m;
  if (parser.parse(r.body)["error"]["message"].get(m) != simdjson::SUCCESS)
    return "<none>";
  return std::string{m};
}

}  // namespace

TEST_CASE("the context length is the engine's check, answered as vLLM answers it, streamed or not") {
  server s;  // max_model_len 512
  const std::string too_long =
      "This model's maximum context length is 512 tokens. However, your request has 600 input "
      "tokens. Please reduce the length of the input messages.";
  for (const std::string stream : {"false", "true"}) {
    CAPTURE(stream);
    auto r = http(s.port(), "POST", "/v1/completions",
                  R"({"prompt":)" + id_prompt(600) + R"(,"max_tokens":4,"stream":)" + stream + "}");
    check_openai_error(r, 400);  // a stream the engine refuses at once is a 400 too, not an event stream
    CHECK(error_param(r) == "input_tokens");
    CHECK(error_message(r) == too_long);
  }
  auto total = http(s.port(), "POST", "/v1/completions", R"({"prompt":)" + id_prompt(450) + R"(,"max_tokens":100})");
  check_openai_error(total, 400);
  CHECK(error_param(total) == "max_tokens");
  CHECK(error_message(total) ==
        "This model's maximum context length is 512 tokens. However, you requested 550 tokens (450 in the messages, "
        "100 in the completion). Please reduce the length of the messages or completion.");
  // Without max_tokens a chat may use the rest of the context: a prompt that leaves no room is the input's fault.
  auto chat = http(s.port(), "POST", "/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":")" + std::string(3000, 'a') + R"("}],"stream":true})");
  check_openai_error(chat, 400);
  CHECK(error_param(chat) == "input_tokens");
  // One prompt of a list too long: the request is refused, and the prompts that started are aborted and give their
  // admission back.
  auto list = http(s.port(), "POST", "/v1/completions",
                   R"({"prompt":[[1,2,3],)" + id_prompt(600) + R"(],"max_tokens":400,"ignore_eos":true})");
  check_openai_error(list, 400);
  CHECK(error_message(list) == too_long);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{30};
  int64_t load = -1;
  while (load != 0 && std::chrono::steady_clock::now() < deadline) {
    simdjson::dom::parser parser;
    load = int64_t(parser.parse(http(s.port(), "GET", "/load").body)["server_load"]);
  }
  CHECK(load == 0);
  // What fits runs: 508 prompt tokens and 4 more fill the context exactly.
  auto fits = http(s.port(), "POST", "/v1/completions", R"({"prompt":)" + id_prompt(508) + R"(,"max_tokens":4})");
  CHECK_MESSAGE(fits.status == 200, fits.body);
}

namespace {

/// The choices' token ids of a completion asked with return_token_ids... read from the logprobs' "token_id:N".
// `[a,b,...]`.
std::string fmt_ids(const std::vector<int32_t>& ids) {
  std::string out{"["};
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0)
      out += ',';
    out += std::to_string(ids[i]);
  }
  out += ']';
  return out;
}

std::vector<int32_t> sampled_ids(const http_reply& r) {
  std::vector<int32_t> ids;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  REQUIRE_MESSAGE(parser.parse(r.body).get(doc) == simdjson::SUCCESS, r.body);
  for (simdjson::dom::element t : doc["choices"].at(0)["logprobs"]["tokens"].get_array()) {
    std::string_view s = t.get_string();
    REQUIRE(s.starts_with("token_id:"));
    ids.push_back(std::stoi(std::string{s.substr(9)}));
  }
  return ids;
}

}  // namespace

TEST_CASE("logit_bias, allowed_token_ids, bad_words and min_tokens act on what is sampled") {
  server s;
  auto ask = [&](const std::string& extra) {
    auto r = http(s.port(), "POST", "/v1/completions",
                  R"({"prompt":"Once upon a time","max_tokens":8,"temperature":1,"seed":3,"logprobs":0,)"
                  R"("return_tokens_as_token_ids":true,"ignore_eos":true)" +
                      extra + "}");
    REQUIRE_MESSAGE(r.status == 200, r.body);
    return sampled_ids(r);
  };
  for (int32_t id : ask(R"(,"logit_bias":{"300":100})"))
    CHECK(id == 300);
  for (int32_t id : ask(R"(,"allowed_token_ids":[310,320,330])"))
    CHECK((id == 310 || id == 320 || id == 330));
  // bad_words: the greedy continuation's first word never appears once banned.
  auto greedy =
      http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0})");
  REQUIRE(greedy.status == 200);
  CHECK(greedy.body.find("there") != std::string::npos);
  auto banned = http(s.port(), "POST", "/v1/completions",
                     R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0,"bad_words":["there"]})");
  REQUIRE(banned.status == 200);
  CHECK(banned.body.find("there") == std::string::npos);
  // min_tokens: with eos made almost certain, still min_tokens tokens come out.
  auto early = http(s.port(), "POST", "/v1/completions",
                    R"({"prompt":"Once upon a time","max_tokens":8,"min_tokens":5,"logit_bias":{"2":30},)"
                    R"("logprobs":0,"return_tokens_as_token_ids":true})");
  REQUIRE_MESSAGE(early.status == 200, early.body);
  const auto ids = sampled_ids(early);
  REQUIRE(ids.size() >= 5);  // 5 forced tokens, then (most likely) the eos that the bias favours
  for (std::size_t i = 0; i < 5; ++i)
    CHECK(ids[i] != 2);
  CHECK(ids.size() < 8);  // the eos did come, once allowed
  // Out-of-vocabulary ids and out-of-range biases are 400s naming the field.
  auto oov = http(s.port(), "POST", "/v1/completions", R"({"prompt":"x","logit_bias":{"512":1}})");
  check_openai_error(oov, 400);
  CHECK(error_param(oov) == "logit_bias");
  auto big = http(s.port(), "POST", "/v1/completions", R"({"prompt":"x","logit_bias":{"5":101}})");
  check_openai_error(big, 400);
  CHECK(error_param(big) == "logit_bias");
  auto oov2 = http(s.port(), "POST", "/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"x"}],"allowed_token_ids":[9999]})");
  check_openai_error(oov2, 400);
  CHECK(error_param(oov2) == "allowed_token_ids");
  auto oov3 = http(s.port(), "POST", "/v1/completions", R"({"prompt":"x","stop_token_ids":[7,99999]})");
  check_openai_error(oov3, 400);
  CHECK(error_param(oov3) == "stop_token_ids");
  CHECK(oov3.body.find("token id 99999 is outside the vocabulary (size 512)") != std::string::npos);
}

TEST_CASE("--reasoning-parser: a reply that never closes its reasoning is all reasoning - constraints need </think>") {
  server s{{"--reasoning-parser", "deepseek_r1"}};
  simdjson::dom::parser parser;
  // stories260K never writes </think>: as DeepSeek-R1 cut off while thinking, the reply is all reasoning.
  auto r = http(s.port(), "POST", "/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":6,"temperature":0})");
  REQUIRE_MESSAGE(r.status == 200, r.body);
  simdjson::dom::element msg = parser.parse(r.body)["choices"].at(0)["message"];
  CHECK(std::string_view(msg["reasoning_content"]).size() > 0);
  CHECK(std::string_view(msg["reasoning"]) == std::string_view(msg["reasoning_content"]));
  CHECK(msg["content"].is_null());
  auto hidden = http(s.port(), "POST", "/v1/chat/completions",
                     R"({"messages":[{"role":"user","content":"x"}],"max_tokens":3,"include_reasoning":false})");
  REQUIRE(hidden.status == 200);
  CHECK(parser.parse(hidden.body)["choices"].at(0)["message"]["reasoning_content"].is_null());
  auto constrained = http(s.port(), "POST", "/v1/chat/completions",
                          R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})");
  // A constraint starts after </think>, which stories260K's tokenizer does not have: refused, naming the field.
  check_openai_error(constrained, 400);
  CHECK(error_param(constrained) == "response_format");
  CHECK(constrained.body.find("the tokenizer has no </think> token") != std::string::npos);
}

TEST_CASE("--enable-force-include-usage: a stream ends with its usage unasked, --structured-outputs-config.backend") {
  server s{{"--enable-force-include-usage", "--structured-outputs-config.backend", "xgrammar"}};
  CHECK(s.log().find("--structured-outputs-config.backend xgrammar has no effect here") != std::string::npos);
  auto stream =
      http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":3,"stream":true})");
  REQUIRE(stream.status == 200);
  CHECK(stream.body.find(R"("choices":[],"usage":{"prompt_tokens":)") != std::string::npos);
  auto plain = http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":3})");
  CHECK(plain.body.find(R"("usage":{"prompt_tokens":)") != std::string::npos);
}

TEST_CASE("--skip-tokenizer-init: token-id prompts give ids and no text, text prompts and chat are refused") {
  server s{{"--skip-tokenizer-init"}};
  simdjson::dom::parser parser;
  auto ids = http(s.port(), "POST", "/v1/completions",
                  R"({"prompt":[1,403,407,261,265],"max_tokens":4,"temperature":0,"return_token_ids":true})");
  REQUIRE_MESSAGE(ids.status == 200, ids.body);
  simdjson::dom::element choice = parser.parse(ids.body)["choices"].at(0);
  CHECK(std::string_view(choice["text"]).empty());
  CHECK(choice["token_ids"].get_array().size() == 4);
  check_openai_error(http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":2})"), 400);
  check_openai_error(
      http(s.port(), "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2})"),
      400);
}

TEST_CASE("/invocations takes a completions or a chat body, /load reports the server's load") {
  server s;
  simdjson::dom::parser parser;
  auto cmpl = http(s.port(), "POST", "/invocations", R"({"prompt":"Once upon a time","max_tokens":2})");
  REQUIRE_MESSAGE(cmpl.status == 200, cmpl.body);
  CHECK(std::string_view(parser.parse(cmpl.body)["object"]) == "text_completion");
  auto chat = http(s.port(), "POST", "/invocations", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})");
  REQUIRE_MESSAGE(chat.status == 200, chat.body);
  CHECK(std::string_view(parser.parse(chat.body)["object"]) == "chat.completion");
  auto neither = http(s.port(), "POST", "/invocations", R"({"input":"hi"})");
  check_openai_error(neither, 400);
  CHECK(neither.body.find("neither") != std::string::npos);
  auto load = http(s.port(), "GET", "/load", "");
  REQUIRE(load.status == 200);
  CHECK(int64_t(parser.parse(load.body)["server_load"]) == 0);  // nothing in flight
}

TEST_CASE("return_token_ids, chat echo, continuous usage stats and the keys vLLM clients read as null") {
  server s;
  simdjson::dom::parser parser;
  // Completions: token_ids and prompt_token_ids when asked, null otherwise.
  auto plain = http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":3})");
  REQUIRE(plain.status == 200);
  simdjson::dom::element doc = parser.parse(plain.body);
  CHECK(doc["choices"].at(0)["prompt_token_ids"].is_null());
  CHECK(doc["choices"].at(0)["prompt_logprobs"].is_null());
  CHECK(doc["choices"].at(0)["token_ids"].is_null());
  auto with_ids = http(s.port(), "POST", "/v1/completions",
                       R"({"prompt":"Once upon a time","max_tokens":3,"temperature":0,"return_token_ids":true})");
  REQUIRE(with_ids.status == 200);
  doc = parser.parse(with_ids.body);
  auto tok = http(s.port(), "POST", "/tokenize", R"({"prompt":"Once upon a time"})");
  simdjson::dom::parser p2;
  CHECK(simdjson::minify(doc["choices"].at(0)["prompt_token_ids"]) == simdjson::minify(p2.parse(tok.body)["tokens"]));
  CHECK(doc["choices"].at(0)["token_ids"].get_array().size() == 3);
  // Chat: prompt_token_ids at the top; echo starts the reply with the last message when it is the assistant's.
  auto chat =
      http(s.port(), "POST", "/v1/chat/completions",
           R"({"messages":[{"role":"user","content":"Once upon a time"},{"role":"assistant","content":"There"}],)"
           R"("max_tokens":3,"echo":true,"return_token_ids":true})");
  REQUIRE_MESSAGE(chat.status == 200, chat.body);
  doc = parser.parse(chat.body);
  CHECK(std::string_view(doc["choices"].at(0)["message"]["content"]).starts_with("There"));
  CHECK(doc["prompt_token_ids"].get_array().size() > 3);
  CHECK(doc["prompt_logprobs"].is_null());
  // Streaming with continuous_usage_stats: every chunk carries the usage so far, growing to the final count.
  auto stream = http(s.port(), "POST", "/v1/completions",
                     R"({"prompt":"Once upon a time","max_tokens":4,"stream":true,"temperature":0,)"
                     R"("stream_options":{"include_usage":true,"continuous_usage_stats":true}})");
  REQUIRE(stream.status == 200);
  int64_t last = -1;
  int chunks = 0;
  for (std::size_t at = stream.body.find("data: {"); at != std::string::npos;
       at = stream.body.find("data: {", at + 1)) {
    const std::string event = stream.body.substr(at + 6, stream.body.find("\n\n", at) - at - 6);
    simdjson::dom::parser pe;
    simdjson::dom::element e = pe.parse(event);
    REQUIRE_MESSAGE(e["usage"].is_object(), event);
    const int64_t done = e["usage"]["completion_tokens"];
    CHECK(done >= last);
    last = done;
    ++chunks;
  }
  CHECK(chunks >= 4);
  CHECK(last == 4);
}

TEST_CASE("/v1/chat/completions/batch: one choice per conversation, each as its own chat request") {
  server s;
  simdjson::dom::parser parser;
  const std::string once = R"([{"role":"user","content":"Once upon a time"}])";
  const std::string lily = R"([{"role":"user","content":"Lily and Tom went to the park to"}])";
  const std::string fields = R"("max_tokens":6,"temperature":0,"logprobs":true,"top_logprobs":2)";
  auto single = [&](const std::string& conversation) {
    auto r = http(s.port(), "POST", "/v1/chat/completions", R"({"messages":)" + conversation + "," + fields + "}");
    REQUIRE_MESSAGE(r.status == 200, r.body);
    return r;
  };
  const auto a = single(once), b = single(lily);
  auto batch = http(s.port(), "POST", "/v1/chat/completions/batch",
                    R"({"model":"stories","messages":[)" + once + "," + lily + "]," + fields + "}");
  REQUIRE_MESSAGE(batch.status == 200, batch.body);
  simdjson::dom::element doc = parser.parse(batch.body);
  CHECK(std::string_view(doc["object"]) == "chat.completion");
  CHECK(std::string_view(doc["id"]).starts_with("chatcmpl-"));
  auto choices = doc["choices"].get_array().value();
  REQUIRE(choices.size() == 2);
  int64_t prompt_tokens = 0, completion_tokens = 0;
  const http_reply* singles[] = {&a, &b};
  for (std::size_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    simdjson::dom::parser ps;
    simdjson::dom::element one = ps.parse(singles[i]->body);
    auto choice = choices.at(i);
    CHECK(int64_t(choice["index"]) == static_cast<int64_t>(i));
    // The same text and logprobs as the conversation sent alone (greedy).
    CHECK(std::string_view(choice["message"]["content"]) ==
          std::string_view(one["choices"].at(0)["message"]["content"]));
    check_same_logprobs(choice["logprobs"], one["choices"].at(0)["logprobs"]);
    prompt_tokens += int64_t(one["usage"]["prompt_tokens"]);
    completion_tokens += int64_t(one["usage"]["completion_tokens"]);
  }
  CHECK(int64_t(doc["usage"]["prompt_tokens"]) == prompt_tokens);
  CHECK(int64_t(doc["usage"]["completion_tokens"]) == completion_tokens);
  CHECK(int64_t(doc["usage"]["total_tokens"]) == prompt_tokens + completion_tokens);
  CHECK(doc["prompt_token_ids"].is_null());

  // Echo is per conversation (the last message's content, when the assistant's); structured outputs hold in each;
  // return_token_ids gives each choice its ids; the request_id names the response.
  auto echoed = http(
      s.port(), "POST", "/v1/chat/completions/batch",
      R"({"messages":[[{"role":"user","content":"Once upon a time"},{"role":"assistant","content":"there"}],)" + lily +
          R"(],"max_tokens":8,"echo":true,"return_token_ids":true,"request_id":"b1",)"
          R"("structured_outputs":{"choice":["yes","no"]}})");
  REQUIRE_MESSAGE(echoed.status == 200, echoed.body);
  doc = parser.parse(echoed.body);
  CHECK(std::string_view(doc["id"]) == "chatcmpl-b1");
  const std::string_view first = doc["choices"].at(0)["message"]["content"];
  const std::string_view second = doc["choices"].at(1)["message"]["content"];
  CHECK((first == "thereyes" || first == "thereno"));
  CHECK((second == "yes" || second == "no"));
  CHECK(doc["choices"].at(1)["token_ids"].get_array().size() >= 1);

  // What vLLM's batch endpoint refuses, and bad conversations, are 400s naming the field and the conversation.
  auto refused = [&](const std::string& body, const std::string& param) {
    auto r = http(s.port(), "POST", "/v1/chat/completions/batch", body);
    check_openai_error(r, 400);
    CHECK_MESSAGE(error_param(r) == param, r.body);
    return r;
  };
  refused(R"({"messages":[)" + once + R"(],"stream":true})", "stream");
  refused(R"({"messages":[)" + once + R"(],"n":2})", "n");
  refused(R"({"messages":[)" + once + R"(],"tools":[{"type":"function","function":{"name":"f"}}]})", "tools");
  refused(R"({"messages":[)" + once + R"(,[{"content":"x"}]]})", "messages[1][0].role");
  refused(R"({"messages":)" + once + "}", "messages[0]");
  auto too_long = refused(R"({"messages":[)" + once + R"(,[{"role":"user","content":")" + std::string(3000, 'a') +
                              R"("}]],"max_tokens":4})",
                          "input_tokens");
  CHECK_MESSAGE(
      too_long.body.find("messages[1]: This model's maximum context length is 512 tokens") != std::string::npos,
      too_long.body);
  // A list of conversations on /v1/chat/completions points at the batch endpoint.
  auto wrong = http(s.port(), "POST", "/v1/chat/completions", R"({"messages":[)" + once + "]}");
  check_openai_error(wrong, 400);
  CHECK(error_param(wrong) == "messages[0]");
  CHECK(wrong.body.find("/v1/chat/completions/batch") != std::string::npos);
  // The server is still fine.
  CHECK(http(s.port(), "GET", "/health").status == 200);
}

TEST_CASE("logprob_token_ids: every output position reports the listed tokens' logprobs, as vLLM shapes them") {
  server s;
  simdjson::dom::parser parser;
  // The reference: the top 20 at each position of the greedy continuation (ids as token_id:N).
  auto top = http(s.port(), "POST", "/v1/completions",
                  R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0,"logprobs":20,)"
                  R"("return_tokens_as_token_ids":true})");
  REQUIRE_MESSAGE(top.status == 200, top.body);
  simdjson::dom::element ref = parser.parse(top.body);
  simdjson::dom::element ref_top = ref["choices"].at(0)["logprobs"]["top_logprobs"];
  // Listed: the 2nd and 5th most likely tokens at position 0, and an unlikely one.
  std::vector<std::string> keys;
  for (auto kv : ref_top.at(0).get_object())
    keys.emplace_back(kv.key);
  REQUIRE(keys.size() >= 5);
  const int32_t second = std::stoi(keys[1].substr(9)), fifth = std::stoi(keys[4].substr(9));
  const std::string listed = fmt_ids({second, fifth, 511});
  auto is_listed = [&](std::string_view token) {
    return token == keys[1] || token == keys[4] || token == "token_id:511";
  };
  auto r = http(s.port(), "POST", "/v1/completions",
                R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0,"logprobs":5,)"
                R"("return_tokens_as_token_ids":true,"logprob_token_ids":)" +
                    listed + "}");
  REQUIRE_MESSAGE(r.status == 200, r.body);
  simdjson::dom::parser p2;
  simdjson::dom::element doc = p2.parse(r.body);
  auto lp = doc["choices"].at(0)["logprobs"];
  CHECK(simdjson::minify(lp["tokens"]) == simdjson::minify(ref["choices"].at(0)["logprobs"]["tokens"]));
  auto dicts = lp["top_logprobs"].get_array().value();
  REQUIRE(dicts.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    auto dict = dicts.at(i).get_object().value();
    const std::string sampled{std::string_view(lp["tokens"].at(i))};
    // The listed tokens and the sampled one, each once, nothing else.
    CHECK(dict.size() == (is_listed(sampled) ? 3u : 4u));
    CHECK(dict[sampled].error() == simdjson::SUCCESS);
    CHECK(double(dict["token_id:511"]) < double(dict[sampled]));
  }
  // Their values are the raw logprobs the top 20 report.
  auto d0 = dicts.at(0).get_object().value();
  for (const std::string& key : {keys[1], keys[4]})
    CHECK(double(d0[key]) == doctest::Approx(double(ref_top.at(0)[key])).epsilon(1e-5));

  // Chat: top_logprobs lists the sampled token first, then the listed ones, instead of the top k; streamed alike.
  const std::string chat_body = R"({"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":3,)"
                                R"("temperature":0,"logprobs":true,"top_logprobs":5,)"
                                R"("return_tokens_as_token_ids":true,"logprob_token_ids":)" +
                                listed;
  auto chat = http(s.port(), "POST", "/v1/chat/completions", chat_body + "}");
  REQUIRE_MESSAGE(chat.status == 200, chat.body);
  simdjson::dom::parser p3;
  simdjson::dom::element cdoc = p3.parse(chat.body);
  auto content = cdoc["choices"].at(0)["logprobs"]["content"].get_array().value();
  REQUIRE(content.size() == 3);
  for (auto entry : content) {
    auto alts = entry["top_logprobs"].get_array().value();
    REQUIRE(alts.size() == (is_listed(std::string_view(entry["token"])) ? 3u : 4u));
    CHECK(std::string_view(alts.at(0)["token"]) == std::string_view(entry["token"]));
    CHECK(double(alts.at(0)["logprob"]) == double(entry["logprob"]));
  }
  auto streamed = http(s.port(), "POST", "/v1/chat/completions", chat_body + R"(,"stream":true})");
  REQUIRE(streamed.status == 200);
  int with_logprobs = 0;
  for (const std::string& payload : sse_payloads(streamed.body)) {
    if (payload == "[DONE]")
      continue;
    simdjson::dom::parser pe;
    simdjson::dom::element e = pe.parse(payload);
    simdjson::dom::array entries;
    if (e["choices"].at(0)["logprobs"]["content"].get(entries) != simdjson::SUCCESS)
      continue;
    for (auto entry : entries) {
      CHECK(entry["top_logprobs"].get_array().size() == (is_listed(std::string_view(entry["token"])) ? 3u : 4u));
      ++with_logprobs;
    }
  }
  CHECK(with_logprobs == 3);
  // And through the batch endpoint, per conversation.
  auto batch =
      http(s.port(), "POST", "/v1/chat/completions/batch",
           R"({"messages":[[{"role":"user","content":"Once upon a time"}],[{"role":"user","content":"Lily"}]],)"
           R"("max_tokens":2,"temperature":0,"logprobs":true,"return_tokens_as_token_ids":true,)"
           R"("logprob_token_ids":)" +
               listed + "}");
  REQUIRE_MESSAGE(batch.status == 200, batch.body);
  simdjson::dom::parser p4;
  simdjson::dom::element bdoc = p4.parse(batch.body);
  for (std::size_t k = 0; k < 2; ++k)  // conversation 0 is the chat request's, greedy: the same first entries
    CHECK(simdjson::minify(bdoc["choices"].at(0)["logprobs"]["content"].at(k)) == simdjson::minify(content.at(k)));
  CHECK(bdoc["choices"].at(1)["logprobs"]["content"].get_array().size() == 2);

  // Bounded by the vocabulary (the 400 names the field and the size), and only with logprobs.
  auto oov =
      http(s.port(), "POST", "/v1/completions", R"({"prompt":"x","logprobs":0,"logprob_token_ids":[3,512,9000]})");
  check_openai_error(oov, 400);
  CHECK(error_param(oov) == "logprob_token_ids");
  CHECK_MESSAGE(oov.body.find("token id(s) [512, 9000] are outside the vocabulary (size 512)") != std::string::npos,
                oov.body);
  auto unasked = http(s.port(), "POST", "/v1/chat/completions",
                      R"({"messages":[{"role":"user","content":"x"}],"logprob_token_ids":[3]})");
  check_openai_error(unasked, 400);
  CHECK(error_param(unasked) == "logprob_token_ids");
}
