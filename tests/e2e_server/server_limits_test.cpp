// `actorllm serve` end to end, for the options that shape who gets served and how: CORS (--allowed-origins),
// admission (--max-queued-requests: 429), --generation-config, --chat-template, and clients that are slow to send
// or never read (the read timeout, from ACTORLLM_HTTP_READ_TIMEOUT_S here) or send oversized heads.
#include "server_harness.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <poll.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace actorllm::e2e;
using namespace std::chrono_literals;

namespace {

const std::string running_series = R"(actorllm:num_requests_running{model_name="stories"})";

/// Sends `request` on a new connection and returns the connection once the response head has arrived (bounded).
int open_stream(uint16_t port, const std::string& body) {
  int fd = connect_to(port);
  send_all(fd, request_text("POST", "/v1/completions", body, {}));
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    REQUIRE_MESSAGE(n > 0, "stream ended early: " << got);
    got.append(buf, static_cast<std::size_t>(n));
  }
  REQUIRE(got.rfind("HTTP/1.1 200", 0) == 0);
  return fd;
}

void reset_close(int fd) {
  linger lg{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  ::close(fd);
}

/// Everything the server sends until it closes (or `limit` passes); "" when nothing came.
std::string read_until_closed(int fd, std::chrono::milliseconds limit) {
  std::string raw;
  char buf[65536];
  const auto deadline = steady::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    if (left <= 0ms)
      break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    raw.append(buf, static_cast<std::size_t>(n));
  }
  return raw;
}

/// Polls /metrics (bounded) until no request runs.
void expect_idle_within(const server& s, std::chrono::milliseconds limit) {
  const auto deadline = steady::now() + limit;
  for (;;) {
    auto m = http(s.port(), "GET", "/metrics").body;
    if (metric(m, running_series) == 0.0)
      return;
    REQUIRE_MESSAGE(steady::now() < deadline, "requests still running:\n" << m);
    std::this_thread::sleep_for(10ms);
  }
}

int64_t usage_of(const std::string& body, const char* field) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  REQUIRE_MESSAGE(parser.parse(body).get(e) == simdjson::SUCCESS, body);
  return int64_t(e["usage"][field]);
}

std::string tokens_of(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  REQUIRE_MESSAGE(parser.parse(body).get(e) == simdjson::SUCCESS, body);
  return simdjson::to_string(e["tokens"]);
}

}  // namespace

TEST_CASE("--allowed-origins: allowed origins get CORS headers, preflights get 204 before the API-key check") {
  server s{{"--allowed-origins", "http://ui.example", "--api-key", "k"}};
  const std::string origin = "Origin: http://ui.example";
  auto pre = http(
      s.port(), "OPTIONS", "/v1/chat/completions", {},
      {origin, "Access-Control-Request-Method: POST", "Access-Control-Request-Headers: authorization, content-type"});
  CHECK(pre.status == 204);
  CHECK(pre.headers["access-control-allow-origin"] == "http://ui.example");
  CHECK(pre.headers["access-control-allow-methods"].find("POST") != std::string::npos);
  CHECK(pre.headers["access-control-allow-headers"].find("Authorization") != std::string::npos);
  CHECK(pre.headers["access-control-allow-headers"].find("x-request-id") != std::string::npos);
  CHECK(!pre.headers["access-control-max-age"].empty());
  // A preflight to any path, even one that does not exist.
  CHECK(http(s.port(), "OPTIONS", "/anything", {}, {origin}).status == 204);

  const std::string req = R"({"prompt":"Once upon a time","max_tokens":2})";
  auto ok = http(s.port(), "POST", "/v1/completions", req, {origin, "Authorization: Bearer k"});
  CHECK(ok.status == 200);
  CHECK(ok.headers["access-control-allow-origin"] == "http://ui.example");
  CHECK(ok.headers["vary"] == "Origin");
  // Errors carry the header too, so the page can read them.
  auto denied = http(s.port(), "POST", "/v1/completions", req, {origin});
  CHECK(denied.status == 401);
  CHECK(denied.headers["access-control-allow-origin"] == "http://ui.example");
  auto streamed =
      http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":2,"stream":true})",
           {origin, "Authorization: Bearer k"});
  CHECK(streamed.status == 200);
  CHECK(streamed.headers["content-type"] == "text/event-stream");
  CHECK(streamed.headers["access-control-allow-origin"] == "http://ui.example");

  // Another origin, or none: no CORS headers, and OPTIONS is routed as usual.
  const std::string evil = "Origin: http://evil.example";
  auto other = http(s.port(), "POST", "/v1/completions", req, {evil, "Authorization: Bearer k"});
  CHECK(other.status == 200);
  CHECK(other.headers.count("access-control-allow-origin") == 0);
  CHECK(http(s.port(), "OPTIONS", "/v1/completions", {}, {evil}).status == 405);
  CHECK(http(s.port(), "GET", "/health").headers.count("access-control-allow-origin") == 0);
}

TEST_CASE("--allowed-origins takes vLLM's JSON list, a comma-separated list, and repeated flags") {
  {
    server s{{"--allowed-origins", R"(["*"])"}};
    auto r = http(s.port(), "GET", "/health", {}, {"Origin: http://anywhere.example"});
    CHECK(r.status == 200);
    CHECK(r.headers["access-control-allow-origin"] == "*");
  }
  server s{{"--allowed-origins", R"(["http://a.example","http://b.example"])", "--allowed-origins",
            "http://c.example,http://d.example", "--allowed-origins", "http://e.example"}};
  for (const char* origin :
       {"http://a.example", "http://b.example", "http://c.example", "http://d.example", "http://e.example"}) {
    INFO(origin);
    auto r = http(s.port(), "GET", "/health", {}, {std::string{"Origin: "} + origin});
    CHECK(r.headers["access-control-allow-origin"] == origin);
  }
  CHECK(
      http(s.port(), "GET", "/health", {}, {"Origin: http://f.example"}).headers.count("access-control-allow-origin") ==
      0);
}

TEST_CASE("without --allowed-origins there are no CORS headers and no preflight answer") {
  server s;
  auto r = http(s.port(), "GET", "/health", {}, {"Origin: http://ui.example"});
  CHECK(r.status == 200);
  CHECK(r.headers.count("access-control-allow-origin") == 0);
  CHECK(http(s.port(), "OPTIONS", "/v1/completions", {}, {"Origin: http://ui.example"}).status == 405);
}

TEST_CASE("--max-queued-requests 0 with --max-num-seqs 1: a second generation request gets 429, slots come back") {
  server s{{"--max-num-seqs", "1", "--max-queued-requests", "0"}};
  int fd = open_stream(s.port(), R"({"prompt":"Once upon a time","max_tokens":500,"ignore_eos":true,"stream":true})");
  auto busy = http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":2})");
  check_openai_error(busy, 429);
  CHECK(busy.headers["retry-after"] == "1");
  CHECK(json_string(busy.body, {"error", "code"}) == "rate_limit_exceeded");
  check_openai_error(
      http(s.port(), "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})"),
      429);
  // Only generation is limited.
  CHECK(http(s.port(), "GET", "/health").status == 200);
  CHECK(http(s.port(), "POST", "/tokenize", R"({"prompt":"hi"})").status == 200);

  // The running request's client goes away: its slot comes back with the abort.
  reset_close(fd);
  const auto deadline = steady::now() + 2s;
  for (;;) {
    auto r = http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":2})");
    if (r.status == 200)
      break;
    REQUIRE_MESSAGE(r.status == 429, r.body);
    REQUIRE_MESSAGE(steady::now() < deadline, "the aborted request kept its slot");
    std::this_thread::sleep_for(10ms);
  }

  // A burst: some get 429, none leaks its slot (each finished request released it before its answer was sent).
  constexpr int burst = 12;
  std::vector<std::string> raws(burst);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < burst; ++i)
      threads.emplace_back([&, i] {
        int c = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(s.port());
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
          const bool stream = i % 2 == 0;
          std::string body =
              std::string{R"({"prompt":"Once upon a time","max_tokens":8)"} + (stream ? R"(,"stream":true})" : "}");
          std::string req = request_text("POST", "/v1/completions", body, {});
          ::send(c, req.data(), req.size(), MSG_NOSIGNAL);
          raws[i] = read_until_closed(c, 10s);
        }
        ::close(c);
      });
    for (auto& t : threads)
      t.join();
  }
  int ok = 0;
  int limited = 0;
  for (const auto& raw : raws) {
    auto r = parse_reply(raw);
    ok += r.status == 200;
    limited += r.status == 429;
  }
  CHECK(ok >= 1);
  CHECK(ok + limited == burst);
  for (int i = 0; i < 5; ++i)
    CHECK(http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":2})").status == 200);
}

TEST_CASE("--generation-config DIR: its sampling fields and max_new_tokens are defaults a request can override") {
  auto dir = test::make_temp_dir("gen_config_e2e");
  std::ofstream{dir / "generation_config.json"} << R"({"temperature":0.0,"top_k":50,"max_new_tokens":5})";
  server s{{"--generation-config", dir.string()}};
  CHECK(s.log().find("Default sampling parameters have been overridden") != std::string::npos);
  const std::string golden = golden_continuation();
  // No temperature, no max_tokens: greedy (temperature 0 from the file), 5 tokens.
  auto r = http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","ignore_eos":true})");
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(usage_of(r.body, "completion_tokens") == 5);
  const std::string text = json_string(r.body, {"choices", "#", "text"});
  CHECK(!text.empty());
  CHECK(golden.rfind(text, 0) == 0);
  // The request's own fields win.
  auto given = http(s.port(), "POST", "/v1/completions",
                    R"({"prompt":"Once upon a time","ignore_eos":true,"max_tokens":9,"temperature":0})");
  REQUIRE(given.status == 200);
  CHECK(usage_of(given.body, "completion_tokens") == 9);
  // Chat gets the default max_tokens too (instead of the rest of the context).
  auto chat = http(s.port(), "POST", "/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"Once upon a time"}],"ignore_eos":true})");
  REQUIRE_MESSAGE(chat.status == 200, chat.body);
  CHECK(usage_of(chat.body, "completion_tokens") == 5);
}

TEST_CASE("--generation-config: a directory without generation_config.json stops start-up naming the file") {
  auto dir = test::make_temp_dir("gen_config_missing_e2e");
  auto r = test::run_command(test::actorllm_binary().string() + " serve " + test::model_dir("stories260K").string() +
                             " --port 0 --generation-config " + dir.string() + " 2>&1");
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.out.find((dir / "generation_config.json").string()) != std::string::npos, r.out);
}

TEST_CASE("--chat-template: a file or an inline template replaces the tokenizer's") {
  const std::string tmpl = "{{ bos_token }}PREFIX:{% for m in messages %} {{ m['content'] }}{% endfor %}";
  const std::string msg = R"({"messages":[{"role":"user","content":"Once upon a time"}])";
  auto check_renders = [&](const server& s) {
    auto t1 = http(s.port(), "POST", "/tokenize", msg + "}");
    auto t2 = http(s.port(), "POST", "/tokenize", R"({"prompt":"PREFIX: Once upon a time"})");
    REQUIRE_MESSAGE(t1.status == 200, t1.body);
    REQUIRE(t2.status == 200);
    CHECK(tokens_of(t1.body) == tokens_of(t2.body));
    auto chat = http(s.port(), "POST", "/v1/chat/completions", msg + R"(,"max_tokens":2})");
    REQUIRE_MESSAGE(chat.status == 200, chat.body);
    simdjson::dom::parser parser;
    CHECK(usage_of(chat.body, "prompt_tokens") == int64_t(parser.parse(t2.body)["count"]));
  };
  {
    server s{{"--chat-template", tmpl}};
    check_renders(s);
  }
  auto dir = test::make_temp_dir("chat_template_e2e");
  std::ofstream{dir / "t.jinja"} << tmpl;
  server s{{"--chat-template", (dir / "t.jinja").string()}};
  check_renders(s);
}

TEST_CASE("--chat-template that does not parse, or names no file, stops start-up with the reason") {
  const std::string base =
      test::actorllm_binary().string() + " serve " + test::model_dir("stories260K").string() + " --port 0 ";
  auto bad = test::run_command(base + "--chat-template '{% for m in %}x' 2>&1");
  CHECK(bad.status != 0);
  CHECK_MESSAGE(bad.out.find("--chat-template") != std::string::npos, bad.out);
  CHECK_MESSAGE(bad.out.find("does not parse") != std::string::npos, bad.out);
  auto missing = test::run_command(base + "--chat-template /no/such/template.jinja 2>&1");
  CHECK(missing.status != 0);
  CHECK_MESSAGE(missing.out.find("/no/such/template.jinja") != std::string::npos, missing.out);
}

TEST_CASE("slow senders get 408 after the read timeout and hold nothing and oversized heads get 431") {
  server s{{}, {"ACTORLLM_HTTP_READ_TIMEOUT_S=1"}};
  // Headers that never end, and a body that stops short of its Content-Length.
  int slow_head = connect_to(s.port());
  send_all(slow_head, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: app");
  int slow_body = connect_to(s.port());
  send_all(slow_body, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":");
  int silent = connect_to(s.port());  // connects, sends nothing
  const auto start = steady::now();
  // Meanwhile everyone else is served.
  CHECK(http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4})").status == 200);
  auto head_reply = read_until_closed(slow_head, 5s);
  auto body_reply = read_until_closed(slow_body, 5s);
  auto silent_reply = read_until_closed(silent, 5s);
  const auto took = steady::now() - start;
  CHECK(parse_reply(head_reply).status == 408);
  CHECK(parse_reply(body_reply).status == 408);
  CHECK(silent_reply.empty());  // closed without an answer
  CHECK(took < 4s);
  ::close(slow_head);
  ::close(slow_body);
  ::close(silent);

  int big = connect_to(s.port());
  send_all(big, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(16 * 1024, 'a') + "\r\n\r\n");
  CHECK(parse_reply(read_until_closed(big, 5s)).status == 431);
  ::close(big);
  CHECK(http(s.port(), "GET", "/health").status == 200);
}

TEST_CASE("a client that never reads its stream blocks neither the engine nor other clients") {
  server s{{}, {"ACTORLLM_HTTP_READ_TIMEOUT_S=1"}};
  int lazy = ::socket(AF_INET, SOCK_STREAM, 0);
  int small = 2048;
  ::setsockopt(lazy, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);  // fills up after a few chunks
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(s.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(lazy, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  // About 7 MB of events (20 sequences x 500 tokens x ~700 bytes with 20 logprobs each): more than the kernel's
  // socket buffers (tcp_wmem's 4 MiB ceiling) hold, so the server's writes stall.
  send_all(lazy, request_text("POST", "/v1/completions",
                              R"({"prompt":"Once upon a time","max_tokens":500,"ignore_eos":true,"stream":true,)"
                              R"("n":20,"logprobs":20})",
                              {}));
  // Others are served while the lazy reader's answer piles up.
  for (int i = 0; i < 4; ++i) {
    auto r = http(s.port(), "POST", "/v1/completions",
                  R"({"prompt":"Once upon a time","max_tokens":16,"temperature":0,"stream":true})");
    REQUIRE(r.status == 200);
    CHECK(sse_payloads(r.body).back() == "[DONE]");
  }
  // Its request ends and frees its sequences: the stalled write times out (1 s), which aborts it, unless the engine
  // (fast on this model) finished generating first, which is counted as a finish by length beside the 4 others'.
  // The bound is generous for a loaded CI machine: 10,000 tokens with 20 logprobs each are generated either way.
  expect_idle_within(s, 20s);
  // The abort of the stalled request is counted when its connection gives up on the write, which may come just
  // after the engine went idle: read the counters until all 5 requests are accounted for (or 10 s pass).
  const std::string reason = R"(actorllm:request_success_total{model_name="stories",finished_reason=")";
  double aborted = 0, by_length = 0;
  for (const auto until = steady::now() + 10s; steady::now() < until;) {
    const std::string metrics = http(s.port(), "GET", "/metrics").body;
    aborted = metric(metrics, reason + R"(abort"})").value_or(0);
    by_length = metric(metrics, reason + R"(length"})").value_or(0);
    if (aborted + by_length >= 5)
      break;
    std::this_thread::sleep_for(50ms);
  }
  INFO("aborted: " << aborted << ", finished by length: " << by_length);
  CHECK((aborted == 1 || by_length == 5));
  CHECK(aborted + by_length == 5);
  ::close(lazy);
  CHECK(http(s.port(), "GET", "/health").status == 200);
}
