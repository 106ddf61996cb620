// `actorllm serve` end to end: the real binary on a free loopback port (--port 0, read back from its log), driven
// by a small blocking HTTP/1.1 client over raw sockets (server_harness.hpp).
#include "server_harness.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace actorllm;
using namespace actorllm::e2e;
using namespace std::chrono_literals;

TEST_CASE("completions at temperature 0 give the golden continuation, streamed and not") {
  server s;
  const std::string golden = golden_continuation();
  const std::string req = R"({"model":"stories","prompt":"Once upon a time","max_tokens":48,"temperature":0})";
  auto r = http(s.port(), "POST", "/v1/completions", req);
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(r.headers["content-type"] == "application/json");
  std::string text = json_string(r.body, {"choices", "#", "text"});
  CHECK(text.size() > 100);
  CHECK(golden.rfind(text, 0) == 0);
  CHECK(json_string(r.body, {"object"}) == "text_completion");

  const std::string sreq =
      R"({"model":"stories","prompt":"Once upon a time","max_tokens":48,"temperature":0,"stream":true})";
  auto sr = http(s.port(), "POST", "/v1/completions", sreq);
  REQUIRE(sr.status == 200);
  CHECK(sr.headers["content-type"] == "text/event-stream");
  CHECK(stream_text(sr.body, false) == text);
}

TEST_CASE("serve -tp 8 -dcp 2: the golden continuation, and the log tells each rank's share of the cache") {
  server s{{"-tp", "8", "-dcp", "2", "--kv-cache-memory", "1048576"}};
  const std::string golden = golden_continuation();
  auto r = http(s.port(), "POST", "/v1/completions",
                R"({"model":"stories","prompt":"Once upon a time","max_tokens":48,"temperature":0})");
  REQUIRE_MESSAGE(r.status == 200, r.body);
  const std::string text = json_string(r.body, {"choices", "#", "text"});
  CHECK(text.size() > 100);
  CHECK(golden.rfind(text, 0) == 0);
  const std::string log = s.log();
  CHECK_MESSAGE(log.find("Decode context parallel size 2: each rank of a group keeps 16 of every block's 32 "
                         "positions") != std::string::npos,
                log);
  CHECK(log.find("blocks of 32") != std::string::npos);
}

TEST_CASE("serve --config with tp 8, dcp 2 and pcp 2: the golden continuation from 16 rank threads, shares logged") {
  const auto dir = test::make_temp_dir("e2e-pcp-config");
  std::ofstream{dir / "cp.toml"} << "[parallel]\ntensor_parallel_size = 8\ndecode_context_parallel_size = 2\n"
                                    "prefill_context_parallel_size = 2\n";
  server s{{"--config", (dir / "cp.toml").string(), "--kv-cache-memory", "1048576"}};
  auto r = http(s.port(), "POST", "/v1/completions",
                R"({"model":"stories","prompt":"Once upon a time","max_tokens":48,"temperature":0})");
  REQUIRE_MESSAGE(r.status == 200, r.body);
  const std::string text = json_string(r.body, {"choices", "#", "text"});
  CHECK(golden_continuation().rfind(text, 0) == 0);
  CHECK(text.size() > 100);
  const std::string log = s.log();
  CHECK_MESSAGE(log.find("Context parallel sizes: prefill 2 x decode 2: each rank of a group keeps 16 of every "
                         "block's 64 positions") != std::string::npos,
                log);
  std::filesystem::remove_all(dir);
}

TEST_CASE("concurrent streaming clients all get the golden continuation") {
  server s;
  const std::string golden = golden_continuation();
  constexpr int clients = 16;
  std::vector<std::string> bodies(clients);
  std::vector<int> statuses(clients);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < clients; ++i)
      threads.emplace_back([&, i] {
        // Only the main thread may use doctest's assertions: collect, check below.
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(s.port());
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        timeval tv{reply_timeout_seconds, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
          ::close(fd);
          return;
        }
        std::string req =
            request_text("POST", "/v1/completions",
                         R"({"prompt":"Once upon a time","max_tokens":32,"temperature":0,"stream":true})", {});
        ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
        char buf[65536];
        for (;;) {
          ssize_t n = ::recv(fd, buf, sizeof buf, 0);
          if (n <= 0)
            break;
          bodies[i].append(buf, static_cast<std::size_t>(n));
        }
        ::close(fd);
      });
    for (auto& t : threads)
      t.join();
  }
  for (int i = 0; i < clients; ++i) {
    auto r = parse_reply(bodies[i]);
    REQUIRE(r.status == 200);
    std::string text = stream_text(r.body, false);
    CHECK(text.size() > 60);
    CHECK(golden.rfind(text, 0) == 0);
  }
}

TEST_CASE("chat completions render the model's chat template") {
  server s;
  const std::string golden = golden_continuation();
  const std::string req =
      R"({"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":24,"temperature":0})";
  auto r = http(s.port(), "POST", "/v1/chat/completions", req);
  REQUIRE_MESSAGE(r.status == 200, r.body);
  // The template renders "<s>Once upon a time": the same tokens as the completion prompt, so the same continuation.
  std::string text = json_string(r.body, {"choices", "#", "message", "content"});
  CHECK(text.size() > 40);
  CHECK(golden.rfind(text, 0) == 0);
  CHECK(json_string(r.body, {"choices", "#", "message", "role"}) == "assistant");

  auto sr = http(s.port(), "POST", "/v1/chat/completions",
                 R"({"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":24,"temperature":0,)"
                 R"("stream":true})");
  REQUIRE(sr.status == 200);
  auto payloads = sse_payloads(sr.body);
  CHECK(payloads.front().find(R"("role":"assistant")") != std::string::npos);
  CHECK(stream_text(sr.body, true) == text);

  // /tokenize with messages tokenizes the rendered template: two messages joined by a newline after BOS.
  auto t1 = http(s.port(), "POST", "/tokenize",
                 R"({"messages":[{"role":"user","content":"Once upon a time"},)"
                 R"({"role":"assistant","content":"there was a cat."}]})");
  auto t2 = http(s.port(), "POST", "/tokenize", R"({"prompt":"Once upon a time\nthere was a cat."})");
  REQUIRE(t1.status == 200);
  REQUIRE(t2.status == 200);
  simdjson::dom::parser p1, p2;
  CHECK(simdjson::to_string(p1.parse(t1.body)["tokens"]) == simdjson::to_string(p2.parse(t2.body)["tokens"]));
}

TEST_CASE("models, health, metrics, version, tokenize and detokenize answer") {
  server s{{"--served-model-name", "org/stories-260K"}};
  auto models = http(s.port(), "GET", "/v1/models");
  REQUIRE(models.status == 200);
  CHECK(json_string(models.body, {"data", "#", "id"}) == "stories");
  // GET /v1/models/{model} for each served name; clients percent-encode a '/' in the name (the openai npm client
  // sends %2F), and one written as is (curl) works too.
  for (const auto& [path, id] :
       std::vector<std::pair<std::string, std::string>>{{"/v1/models/stories", "stories"},
                                                        {"/v1/models/org%2Fstories-260K", "org/stories-260K"},
                                                        {"/v1/models/org%2fstories%2D260K", "org/stories-260K"},
                                                        {"/v1/models/org/stories-260K", "org/stories-260K"}}) {
    auto one = http(s.port(), "GET", path);
    INFO(path << " -> " << one.body);
    REQUIRE(one.status == 200);
    CHECK(json_string(one.body, {"id"}) == id);
    CHECK(json_string(one.body, {"object"}) == "model");
    CHECK(json_string(one.body, {"owned_by"}) == "actorllm");
  }
  for (const std::string path : {"/v1/models/nope", "/v1/models/org%2Fnope", "/v1/models/stories%"}) {
    auto unknown = http(s.port(), "GET", path);
    INFO(path << " -> " << unknown.body);
    check_openai_error(unknown, 404);
    CHECK(json_string(unknown.body, {"error", "param"}) == "model");
  }
  check_openai_error(http(s.port(), "POST", "/v1/models/stories"), 405);
  CHECK(http(s.port(), "GET", "/health").status == 200);
  auto metrics = http(s.port(), "GET", "/metrics");
  REQUIRE(metrics.status == 200);
  CHECK(metrics.headers["content-type"].rfind("text/plain", 0) == 0);
  CHECK(metric(metrics.body, R"(actorllm:num_requests_running{model_name="stories"})") == 0.0);
  CHECK(http(s.port(), "GET", "/health", {}, {"X-Request-Id: my-id-42"}).headers["x-request-id"] == "my-id-42");
  CHECK(http(s.port(), "GET", "/health").headers["x-request-id"].size() == 32);  // generated
  auto version = http(s.port(), "GET", "/version");
  REQUIRE(version.status == 200);
  CHECK(!json_string(version.body, {"version"}).empty());

  auto tok = http(s.port(), "POST", "/tokenize", R"({"prompt":"Once upon a time"})");
  REQUIRE(tok.status == 200);
  simdjson::dom::parser parser;
  auto doc = parser.parse(tok.body);
  CHECK(simdjson::to_string(doc["tokens"]) == "[1,403,407,261,378]");  // BOS + the reference's first ids
  CHECK(int64_t(doc["count"]) == 5);
  CHECK(int64_t(doc["max_model_len"]) == 512);
  auto detok = http(s.port(), "POST", "/detokenize", R"({"tokens":[403,407,261,378]})");
  REQUIRE(detok.status == 200);
  CHECK(json_string(detok.body, {"prompt"}).find("Once upon a time") != std::string::npos);
}

TEST_CASE("logprobs name each token by its text in the output, leading space included") {
  server s;
  auto r = http(s.port(), "POST", "/v1/completions",
                R"({"prompt":"Once upon a time","max_tokens":3,"temperature":0,"logprobs":1})");
  REQUIRE(r.status == 200);
  simdjson::dom::parser parser;
  simdjson::dom::element choice = parser.parse(r.body)["choices"].at(0);
  CHECK(std::string_view(choice["text"]) == ", there was");
  CHECK(simdjson::to_string(choice["logprobs"]["tokens"]) == R"([","," there"," was"])");
  CHECK(simdjson::to_string(choice["logprobs"]["text_offset"]) == "[0,1,7]");
  // At temperature 0 the one alternative is the chosen token, under the same name.
  CHECK(simdjson::to_string(choice["logprobs"]["top_logprobs"].at(1)).rfind(R"({" there":)", 0) == 0);

  auto c = http(s.port(), "POST", "/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":8,"temperature":0,)"
                R"("logprobs":true,"top_logprobs":1})");
  REQUIRE(c.status == 200);
  simdjson::dom::parser chat_parser;
  simdjson::dom::element chat = chat_parser.parse(c.body)["choices"].at(0);
  std::string joined;
  bool saw_space = false;
  for (simdjson::dom::element entry : chat["logprobs"]["content"].get_array()) {
    const std::string_view token = entry["token"];
    joined += token;
    std::string bytes;
    for (simdjson::dom::element b : entry["bytes"].get_array())
      bytes += static_cast<char>(int64_t(b));
    CHECK(bytes == token);
    CHECK(std::string_view(entry["top_logprobs"].at(0)["token"]) == token);
    saw_space = saw_space || (!token.empty() && token.front() == ' ');
  }
  CHECK(joined == std::string_view(chat["message"]["content"]));
  CHECK(saw_space);
}

TEST_CASE("bad input gets 4xx in OpenAI's shape and the server stays up") {
  server s{{"--max-body-bytes", "4096"}};
  check_openai_error(http(s.port(), "POST", "/v1/completions", "{not json"), 400);
  check_openai_error(http(s.port(), "POST", "/v1/completions", R"({"prompt":1})"), 400);
  check_openai_error(http(s.port(), "POST", "/v1/completions", R"({"prompt":"hi","temperature":-1})"), 400);
  check_openai_error(http(s.port(), "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":100000})"), 400);
  check_openai_error(http(s.port(), "POST", "/v1/chat/completions", R"({"messages":"hi"})"), 400);
  check_openai_error(http(s.port(), "POST", "/v1/completions", "{\"prompt\":\"\xff\xfe\"}"), 400);
  check_openai_error(http(s.port(), "POST", "/v1/completions", R"({"model":"nope","prompt":"hi"})"), 404);
  check_openai_error(http(s.port(), "POST", "/detokenize", R"({"tokens":[-1]})"), 400);
  check_openai_error(http(s.port(), "POST", "/v1/completions", std::string(8000, ' ')), 413);
  check_openai_error(http(s.port(), "GET", "/no/such/route"), 404);
  check_openai_error(http(s.port(), "GET", "/v1/completions"), 405);
  CHECK(http(s.port(), "GET", "/health").status == 200);
  auto ok = http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4})");
  CHECK(ok.status == 200);
}

TEST_CASE("--api-key: 401 without the right bearer token") {
  server s{{"--api-key", "sekrit"}};
  const std::string req = R"({"prompt":"Once upon a time","max_tokens":2})";
  check_openai_error(http(s.port(), "POST", "/v1/completions", req), 401);
  check_openai_error(http(s.port(), "POST", "/v1/completions", req, {"Authorization: Bearer wrong"}), 401);
  CHECK(http(s.port(), "POST", "/v1/completions", req, {"Authorization: Bearer sekrit"}).status == 200);
  CHECK(http(s.port(), "GET", "/health").status == 200);
}

namespace {

/// Polls /metrics (bounded by 1 s) until `n` requests finished as aborted, none runs and no KV block is held (every
/// block is free or cached and evictable: nothing leaked).
void expect_aborted_within_1s(const server& s, double n) {
  const std::string aborted = R"(actorllm:request_success_total{model_name="stories",finished_reason="abort"})";
  const std::string running = R"(actorllm:num_requests_running{model_name="stories"})";
  const std::string kv_usage = R"(actorllm:kv_cache_usage_perc{model_name="stories"})";
  const auto deadline = steady::now() + 1s;
  for (;;) {
    auto m = http(s.port(), "GET", "/metrics").body;
    if (metric(m, aborted) == n && metric(m, running) == 0.0 && metric(m, kv_usage) == 0.0)
      break;
    REQUIRE_MESSAGE(steady::now() < deadline, "request not aborted within 1 s:\n" << m);
    std::this_thread::sleep_for(10ms);
  }
}

void reset_and_close(int fd) {
  linger lg{1, 0};  // reset the connection, as a killed client does
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  ::close(fd);
}

}  // namespace

TEST_CASE("a client that disconnects mid-stream gets its request aborted") {
  server s;
  int fd = connect_to(s.port());
  send_all(fd, request_text("POST", "/v1/completions",
                            R"({"prompt":"Once upon a time","max_tokens":500,"ignore_eos":true,"stream":true})", {}));
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    REQUIRE(n > 0);
    got.append(buf, static_cast<std::size_t>(n));
  }
  reset_and_close(fd);
  expect_aborted_within_1s(s, 1.0);
  CHECK(http(s.port(), "GET", "/health").status == 200);
}

TEST_CASE("a client that hangs up while waiting for a non-streamed answer gets its request aborted") {
  server s;
  int fd = connect_to(s.port());
  send_all(fd, request_text("POST", "/v1/completions",
                            R"({"prompt":"Once upon a time","max_tokens":500,"ignore_eos":true})", {}));
  // Hang up once the request runs: one that hangs up sooner is dropped before it is submitted (net/handler_pool),
  // with nothing to abort.
  const std::string running = R"(actorllm:num_requests_running{model_name="stories"})";
  const auto deadline = steady::now() + 5s;
  while (metric(http(s.port(), "GET", "/metrics").body, running) != 1.0 && steady::now() < deadline)
    std::this_thread::sleep_for(2ms);
  REQUIRE(metric(http(s.port(), "GET", "/metrics").body, running) == 1.0);
  reset_and_close(fd);
  expect_aborted_within_1s(s, 1.0);
  CHECK(http(s.port(), "GET", "/health").status == 200);
}

TEST_CASE("SIGTERM lets an in-flight stream finish, then exits 0") {
  // 200 tokens take a fraction of a second here, but many seconds on a machine busy with other tests: the drain's
  // limit is not what this test measures.
  server s{{"--shutdown-timeout", "60"}};
  int fd = connect_to(s.port());
  send_all(fd, request_text("POST", "/v1/completions",
                            R"({"prompt":"Once upon a time","max_tokens":200,"ignore_eos":true,"stream":true})", {}));
  std::string raw;
  char buf[65536];
  while (raw.find("data: ") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    REQUIRE(n > 0);
    raw.append(buf, static_cast<std::size_t>(n));
  }
  REQUIRE(::kill(s.pid(), SIGTERM) == 0);
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    raw.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  auto r = parse_reply(raw);
  auto payloads = sse_payloads(r.body);
  REQUIRE(payloads.size() >= 2);  // the stream ran to its end: the last chunk finishes by length, then [DONE]
  CHECK(payloads[payloads.size() - 2].find(R"("finish_reason":"length")") != std::string::npos);
  CHECK_MESSAGE(s.wait_exit(10s) == 0, s.log());
}

TEST_CASE("SIGTERM drains and exits 0") {
  server s;
  CHECK(http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4})").status == 200);
  REQUIRE(::kill(s.pid(), SIGTERM) == 0);
  CHECK_MESSAGE(s.wait_exit(10s) == 0, s.log());
}

TEST_CASE("serve without MODEL and without ACTORLLM_DEFAULT_MODEL is an error") {
  auto r =
      test::run_command("env -u ACTORLLM_DEFAULT_MODEL " + test::actorllm_binary().string() + " serve --port 0 2>&1");
  CHECK(r.status != 0);
  CHECK(r.out.find("MODEL") != std::string::npos);
}

namespace {

/// usage.prompt_tokens_details.cached_tokens of a response body; -1 when the field is absent.
int64_t cached_tokens_of(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  REQUIRE_MESSAGE(parser.parse(body).get(e) == simdjson::SUCCESS, "not JSON: " << body);
  int64_t n = -1;
  if (e["usage"]["prompt_tokens_details"]["cached_tokens"].get(n) != simdjson::SUCCESS)
    return -1;
  return n;
}

/// A completions body with a 100-token id prompt (6 full blocks of 16 and 4 tokens) and an optional cache_salt.
std::string long_prompt_request(const std::string& salt_field = "") {
  std::string ids;
  for (int i = 0; i < 100; ++i) {
    if (i > 0)
      ids += ',';
    ids += std::to_string(3 + (i * 37) % 500);
  }
  return R"({"prompt":[)" + ids + R"(],"max_tokens":8,"temperature":0)" + salt_field + "}";
}

}  // namespace

TEST_CASE("prefix caching: cached_tokens, cache_salt, POST /reset_prefix_cache and the hit metrics") {
  server s{{"--enable-prompt-tokens-details"}};
  const std::string queries = R"(actorllm:prefix_cache_queries_total{model_name="stories"})";
  const std::string hits = R"(actorllm:prefix_cache_hits_total{model_name="stories"})";
  auto first = http(s.port(), "POST", "/v1/completions", long_prompt_request());
  REQUIRE_MESSAGE(first.status == 200, first.body);
  CHECK(cached_tokens_of(first.body) == 0);
  const std::string text = json_string(first.body, {"choices", "#", "text"});

  // The same prompt again: the 6 full blocks come from the cache (the last token is always computed), and the
  // output is the same.
  auto again = http(s.port(), "POST", "/v1/completions", long_prompt_request());
  REQUIRE(again.status == 200);
  CHECK(cached_tokens_of(again.body) == 96);
  CHECK(json_string(again.body, {"choices", "#", "text"}) == text);

  // Another tenant's salt finds nothing; the same salt again finds its own blocks.
  auto salted = http(s.port(), "POST", "/v1/completions", long_prompt_request(R"(,"cache_salt":"tenant-a")"));
  REQUIRE(salted.status == 200);
  CHECK(cached_tokens_of(salted.body) == 0);
  CHECK(json_string(salted.body, {"choices", "#", "text"}) == text);
  auto salted_again = http(s.port(), "POST", "/v1/completions", long_prompt_request(R"(,"cache_salt":"tenant-a")"));
  CHECK(cached_tokens_of(salted_again.body) == 96);
  CHECK(cached_tokens_of(
            http(s.port(), "POST", "/v1/completions", long_prompt_request(R"(,"cache_salt":"tenant-b")")).body) == 0);

  // Chat completions take cache_salt too, and report cached tokens in a streamed usage chunk as well.
  std::string long_message(400, 'a');
  for (std::size_t i = 0; i < long_message.size(); i += 5)
    long_message[i] = ' ';
  const std::string chat = R"({"messages":[{"role":"user","content":")" + long_message +
                           R"("}],"max_tokens":4,"temperature":0,"cache_salt":"chat-tenant")";
  auto chat_first = http(s.port(), "POST", "/v1/chat/completions", chat + "}");
  REQUIRE_MESSAGE(chat_first.status == 200, chat_first.body);
  CHECK(cached_tokens_of(chat_first.body) == 0);
  auto chat_stream = http(s.port(), "POST", "/v1/chat/completions",
                          chat + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  REQUIRE(chat_stream.status == 200);
  const auto payloads = sse_payloads(chat_stream.body);
  REQUIRE(payloads.size() >= 2);
  CHECK(cached_tokens_of(payloads[payloads.size() - 2]) > 0);  // the usage chunk, before [DONE]

  // Bad salts are refused with the field named.
  for (const std::string bad : {R"(,"cache_salt":"")", R"(,"cache_salt":5)", R"(,"cache_salt":["a"])"}) {
    auto r = http(s.port(), "POST", "/v1/completions", long_prompt_request(bad));
    INFO(bad << " -> " << r.body);
    check_openai_error(r, 400);
    CHECK(json_string(r.body, {"error", "param"}) == "cache_salt");
  }
  auto bad_chat = http(s.port(), "POST", "/v1/chat/completions",
                       R"({"messages":[{"role":"user","content":"hi"}],"cache_salt":""})");
  check_openai_error(bad_chat, 400);
  CHECK(json_string(bad_chat.body, {"error", "param"}) == "cache_salt");

  // The counters, in tokens: every completion above looked up 100 prompt tokens, and 3 of them found 96.
  auto m = http(s.port(), "GET", "/metrics").body;
  CHECK(metric(m, queries) >= 500.0);
  CHECK(metric(m, hits) >= 3 * 96.0);
  CHECK(metric(m, R"(actorllm:kv_cache_usage_perc{model_name="stories"})") == 0.0);  // cached blocks count as free

  // After a reset nothing is reused; then the cache fills again.
  auto reset = http(s.port(), "POST", "/reset_prefix_cache");
  CHECK(reset.status == 200);
  CHECK(http(s.port(), "GET", "/reset_prefix_cache").status == 405);
  CHECK(cached_tokens_of(http(s.port(), "POST", "/v1/completions", long_prompt_request()).body) == 0);
  CHECK(cached_tokens_of(http(s.port(), "POST", "/v1/completions", long_prompt_request()).body) == 96);
}

TEST_CASE("prefix caching off: --no-enable-prefix-caching computes every prompt and reports no hit") {
  server s{{"--no-enable-prefix-caching", "--enable-prompt-tokens-details"}};
  auto first = http(s.port(), "POST", "/v1/completions", long_prompt_request());
  auto again = http(s.port(), "POST", "/v1/completions", long_prompt_request());
  REQUIRE(again.status == 200);
  CHECK(cached_tokens_of(again.body) == 0);
  CHECK(json_string(again.body, {"choices", "#", "text"}) == json_string(first.body, {"choices", "#", "text"}));
  CHECK(metric(http(s.port(), "GET", "/metrics").body,
               R"(actorllm:prefix_cache_queries_total{model_name="stories"})") == 0.0);
  // Without --enable-prompt-tokens-details usage has no prompt_tokens_details (vLLM's default).
  server plain;
  CHECK(cached_tokens_of(http(plain.port(), "POST", "/v1/completions", long_prompt_request()).body) == -1);
}

TEST_CASE("--api-key guards POST /reset_prefix_cache") {
  server s{{"--api-key", "sekrit"}};
  check_openai_error(http(s.port(), "POST", "/reset_prefix_cache"), 401);
  CHECK(http(s.port(), "POST", "/reset_prefix_cache", "", {"Authorization: Bearer sekrit"}).status == 200);
}
