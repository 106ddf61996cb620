// Issue 30, items 5 and 8, against the real `actorllm serve` on stories260K: one cheap request that used to make the
// server unusable (huge stop lists, n in the millions, prompt lists of thousands × n, thousands of template kwargs or
// tools), and clients that hang up on a batch prompt list. For each: the hostile request gets its 400 naming the
// field and the flag, the process stays up, /health answers within 1 s and a well-behaved completion within 2 s of
// its normal latency while the attack runs, and the server's peak memory (VmHWM) stays under a stated bound.
// The attacks are scaled down from the issue's (20,000 stop strings rather than 100,000, ...) where that already
// showed the problem on the old code; the figures measured there are in the commit message.
#include "server_harness.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace actorllm::e2e;
using namespace std::chrono_literals;

namespace {

const std::string running_series = R"(actorllm:num_requests_running{model_name="stories"})";
const std::string waiting_series = R"(actorllm:num_requests_waiting{model_name="stories"})";
const std::string normal_request = R"({"prompt":"Once upon a time","max_tokens":16,"temperature":0})";

/// The bound on the server's peak resident memory (VmHWM) through each test: an idle stories260K server peaks at
/// about 185 MB, these tests at about 210 MB. The issue measured 1.9 GB (100,000 stop strings × n=256), 5.6 GB
/// (n = 10,000,000) and 1.8 GB (10,000 prompts × n=256) on the old code.
constexpr long peak_bound_kb = 400 * 1024;

/// A field of /proc/PID/status in kB (VmRSS, VmHWM).
long status_kb(pid_t pid, const std::string& field) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0)
      return std::stol(line.substr(field.size() + 1));
  return -1;
}

/// prefix + i (built by appending: GCC 12 warns falsely on `"s" + std::to_string(i)`).
std::string numbered(const char* prefix, std::size_t i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

double seconds_since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

/// The normal latency of the well-behaved request: the best of a few runs on the idle server.
double normal_latency(const server& s) {
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = steady::now();
    REQUIRE(http(s.port(), "POST", "/v1/completions", normal_request).status == 200);
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

/// Checks what must hold while the server is under attack: /health answers 200 within 1 s, the well-behaved request
/// completes within 2 s of its normal latency, the process is alive.
void check_serving(const server& s, double normal_s) {
  auto t0 = steady::now();
  auto health = http(s.port(), "GET", "/health");
  CHECK(health.status == 200);
  CHECK(seconds_since(t0) < 1.0);
  t0 = steady::now();
  auto ok = http(s.port(), "POST", "/v1/completions", normal_request);
  CHECK_MESSAGE(ok.status == 200, ok.body);
  CHECK(seconds_since(t0) < normal_s + 2.0);
  CHECK(::kill(s.pid(), 0) == 0);
}

/// Sends the hostile `body` to `target` on its own thread while the main thread checks that the server keeps
/// serving (at least once, and until the hostile answer arrives). Returns the hostile request's answer.
http_reply attack(const server& s, double normal_s, const std::string& target, const std::string& body) {
  std::atomic<bool> done{false};
  http_reply reply;
  std::thread attacker{[&] {
    // No doctest assertion inside: an incomplete answer is status 0 (the checks below report it); the socket's reply
    // timeout bounds the wait.
    reply = http(s.port(), "POST", target, body);
    done = true;
  }};
  {
    // A failed REQUIRE below ends the test case: the attacker is joined first (its answer is bounded by the
    // reply timeout).
    struct joiner {
      std::thread& t;
      ~joiner() { t.join(); }
    } join_attacker{attacker};
    do
      check_serving(s, normal_s);
    while (!done);
  }
  check_serving(s, normal_s);
  return reply;
}

/// The hostile request's 400, naming the field in `param` and the flag in the message.
void check_refused(const http_reply& r, const std::string& param, const std::string& flag) {
  check_openai_error(r, 400);
  CHECK(json_string(r.body, {"error", "param"}) == param);
  const std::string message = json_string(r.body, {"error", "message"});
  CHECK_MESSAGE(message.find(flag) != std::string::npos, message);
}

void check_peak_memory(const server& s) {
  const long hwm = status_kb(s.pid(), "VmHWM");
  MESSAGE("server VmHWM " << hwm / 1024 << " MB, VmRSS " << status_kb(s.pid(), "VmRSS") / 1024 << " MB");
  CHECK(hwm > 0);
  CHECK(hwm < peak_bound_kb);
}

std::string string_list(std::size_t count, const std::function<std::string(std::size_t)>& item) {
  std::string s = "[";
  for (std::size_t i = 0; i < count; ++i) {
    if (i > 0)
      s += ',';
    s += '"' + item(i) + '"';
  }
  return s + "]";
}

/// Polls /metrics (bounded) until no request runs or waits; the seconds that took.
double seconds_until_idle(const server& s, std::chrono::milliseconds limit) {
  const auto t0 = steady::now();
  for (;;) {
    auto m = http(s.port(), "GET", "/metrics").body;
    if (metric(m, running_series) == 0.0 && metric(m, waiting_series) == 0.0)
      return seconds_since(t0);
    REQUIRE_MESSAGE(steady::now() - t0 < limit, "requests still running or waiting:\n" << m);
  }
}

/// Polls /load (bounded) until no admitted sequence holds a place; the seconds that took.
double seconds_until_unloaded(const server& s, std::chrono::milliseconds limit) {
  const auto t0 = steady::now();
  for (;;) {
    const auto body = http(s.port(), "GET", "/load").body;
    if (body.find("\"server_load\":0}") != std::string::npos)
      return seconds_since(t0);
    REQUIRE_MESSAGE(steady::now() - t0 < limit, "places still held: " << body);
  }
}

/// Polls /metrics (bounded) until some request runs.
void wait_until_running(const server& s) {
  const auto deadline = steady::now() + 20s;
  while (metric(http(s.port(), "GET", "/metrics").body, running_series).value_or(0) == 0.0)
    REQUIRE_MESSAGE(steady::now() < deadline, "the batch never started");
}

}  // namespace

TEST_CASE("attack: 20,000 stop strings with n=256, or 100 KB of them, get a 400 naming the flag") {
  server s;
  const double normal_s = normal_latency(s);
  // The issue's 100,000 (1.4 MB) scaled to 20,000 (280 KB): on the old code each of the 256 sequences copied them
  // all and rescanned them per token, so this alone held the engine for minutes.
  const std::string many = R"({"prompt":"Once upon a time","max_tokens":64,"n":256,"stop":)" +
                           string_list(20000, [](std::size_t i) { return numbered("stop", i); }) + "}";
  check_refused(attack(s, normal_s, "/v1/completions", many), "stop", "--max-stop-strings");
  const std::string long_ones = R"({"prompt":"Once upon a time","max_tokens":64,"n":256,"stop":)" +
                                string_list(100, [](std::size_t i) { return std::string(1000, 'a' + i % 26); }) + "}";
  check_refused(attack(s, normal_s, "/v1/completions", long_ones), "stop", "--max-stop-bytes");
  // The same through chat.
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stop":)" +
                           string_list(129, [](std::size_t i) { return numbered("s", i); }) + "}";
  check_refused(attack(s, normal_s, "/v1/chat/completions", chat), "stop", "--max-stop-strings");
  // Within the limits (128 stop strings, 16 KB) n=256 runs to the end at the speed of any request.
  const auto t0 = steady::now();
  const std::string within = R"({"prompt":"Once upon a time","max_tokens":32,"n":256,"ignore_eos":true,"stop":)" +
                             string_list(128, [](std::size_t i) { return std::string(120, 'q') + std::to_string(i); }) +
                             "}";
  auto ok = http(s.port(), "POST", "/v1/completions", within);
  CHECK_MESSAGE(ok.status == 200, ok.body);
  MESSAGE("n=256 with 128 stop strings of 123 bytes, 32 tokens: " << seconds_since(t0) << " s");
  check_peak_memory(s);
}

TEST_CASE("attack: n=10,000,000 and n=2^31-1 get a 400 naming --max-num-seqs before anything is allocated") {
  server s;
  const double normal_s = normal_latency(s);
  for (const char* n : {"10000000", "2147483647", "257"}) {
    INFO("n=" << n);
    check_refused(attack(s, normal_s, "/v1/completions",
                         std::string{R"({"prompt":"Once upon a time","max_tokens":4,"n":)"} + n + "}"),
                  "n", "--max-num-seqs");
    check_refused(attack(s, normal_s, "/v1/chat/completions",
                         std::string{R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"n":)"} + n + "}"),
                  "n", "--max-num-seqs");
  }
  // n is checked first: a body that would also fail elsewhere (stop strings) names n.
  check_refused(http(s.port(), "POST", "/v1/completions",
                     R"({"prompt":"p","stop":)" + string_list(500, [](std::size_t i) { return std::to_string(i); }) +
                         R"(,"n":1000000})"),
                "n", "--max-num-seqs");
  check_peak_memory(s);
}

TEST_CASE("attack: prompt lists of 10,000 x n=256 get a 400, n x prompts is admitted as sequences") {
  server s{{"--max-num-seqs", "16", "--max-queued-requests", "16"}};
  const double normal_s = normal_latency(s);
  const std::string huge = R"({"max_tokens":64,"n":16,"prompt":)" +
                           string_list(10000, [](std::size_t i) { return numbered("Once upon a time ", i); }) + "}";
  check_refused(attack(s, normal_s, "/v1/completions", huge), "prompt", "--max-prompts-per-request");
  // 100 prompts × n=16 = 1,600 sequences: more than the engine can ever hold (16 running + 16 queued).
  const std::string over = R"({"max_tokens":64,"n":16,"prompt":)" +
                           string_list(100, [](std::size_t i) { return numbered("Once upon a time ", i); }) + "}";
  auto r = attack(s, normal_s, "/v1/completions", over);
  check_refused(r, "n", "--max-queued-requests");
  CHECK(json_string(r.body, {"error", "message"}).find("1600 sequences") != std::string::npos);
  // 20 sequences hold their places while they run: 16 more do not fit beside them (429); once they are gone, do.
  int fd = connect_to(s.port());
  send_all(fd, request_text("POST", "/v1/completions",
                            R"({"max_tokens":400,"ignore_eos":true,"stream":true,"n":4,"prompt":)" +
                                string_list(5, [](std::size_t i) { return numbered("Once ", i); }) + "}",
                            {}));
  wait_until_running(s);
  auto busy = http(s.port(), "POST", "/v1/completions",
                   R"({"max_tokens":2,"prompt":)" + string_list(16, [](std::size_t) { return "x"; }) + "}");
  check_openai_error(busy, 429);
  ::close(fd);
  seconds_until_idle(s, 5s);
  // The engine idles when the aborted sequences end; their places are given back when the stream's handler sees the
  // hang-up, a moment later: /load says when.
  seconds_until_unloaded(s, 5s);
  CHECK(http(s.port(), "POST", "/v1/completions",
             R"({"max_tokens":2,"prompt":)" + string_list(16, [](std::size_t) { return "x"; }) + "}")
            .status == 200);
  check_peak_memory(s);
}

TEST_CASE("attack: a client that hangs up on a batch prompt list aborts every prompt and sequence at once") {
  server s;
  const double normal_s = normal_latency(s);
  for (const bool stream : {false, true}) {
    INFO("stream " << stream);
    // 1,024 prompts × n=4 = 4,096 sequences of 400 tokens: minutes of work if it is not aborted.
    const std::string batch = std::string{R"({"max_tokens":400,"ignore_eos":true,"n":4,"stream":)"} +
                              (stream ? "true" : "false") + R"(,"prompt":)" +
                              string_list(1024, [](std::size_t i) { return numbered("Once upon a time ", i); }) + "}";
    int fd = connect_to(s.port());
    send_all(fd, request_text("POST", "/v1/completions", batch, {}));
    wait_until_running(s);
    // /health stays fast (completions queue behind the batch's sequences, as they should: it is work, not an attack,
    // until its client leaves).
    const auto t0 = steady::now();
    CHECK(http(s.port(), "GET", "/health").status == 200);
    CHECK(seconds_since(t0) < 1.0);
    linger lg{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    ::close(fd);  // a reset: the client is gone
    const double took = seconds_until_idle(s, 3s);
    MESSAGE("every sequence of the batch gone " << took << " s after the hang-up");
    check_serving(s, normal_s);
  }
  check_peak_memory(s);
}

TEST_CASE("attack: 100,000 chat_template_kwargs keys get a 400, under a raised limit they render in linear time") {
  std::string kwargs = "{";
  for (int i = 0; i < 100000; ++i) {
    kwargs += i > 0 ? ",\"k" : "\"k";
    kwargs += std::to_string(i);
    kwargs += "\":1";
  }
  kwargs += "}";
  const std::string body =
      R"({"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":4,"chat_template_kwargs":)" + kwargs +
      "}";
  {
    server s;
    const double normal_s = normal_latency(s);
    check_refused(attack(s, normal_s, "/v1/chat/completions", body), "chat_template_kwargs",
                  "--max-chat-template-kwargs");
    check_refused(attack(s, normal_s, "/tokenize", body), "chat_template_kwargs", "--max-chat-template-kwargs");
    check_peak_memory(s);
  }
  // The old code took 24 s for these (each variable's assignment scanned all the ones before it).
  server raised{{"--max-chat-template-kwargs", "100000"}};
  const auto t0 = steady::now();
  auto r = http(raised.port(), "POST", "/v1/chat/completions", body);
  CHECK_MESSAGE(r.status == 200, r.body);
  MESSAGE("100,000 chat_template_kwargs rendered and answered in " << seconds_since(t0) << " s");
  CHECK(seconds_since(t0) < 3.0);
}

TEST_CASE("attack: 300 tools with tool_choice required get a 400 naming --max-tools") {
  server s;
  const double normal_s = normal_latency(s);
  auto tools = [](int count) {
    std::string t = "[";
    for (int i = 0; i < count; ++i)
      t += std::string{i > 0 ? "," : ""} + R"({"type":"function","function":{"name":"tool_)" + std::to_string(i) +
           R"(","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},)"
           R"("required":["a"]}}})";
    return t + "]";
  };
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"tool_choice":"required",)"
                           R"("tools":)" +
                           tools(300) + "}";
  check_refused(attack(s, normal_s, "/v1/chat/completions", body), "tools", "--max-tools");
  check_peak_memory(s);
}

TEST_CASE("attack: token-id lists longer than the vocabulary and too many bad_words get a 400") {
  server s;
  const double normal_s = normal_latency(s);
  std::string bias = "{";
  for (int i = 0; i < 600; ++i)  // stories260K has 512 tokens: some ids repeat
  {
    bias += i > 0 ? ",\"" : "\"";
    bias += std::to_string(i % 500);
    bias += "\":1";
  }
  bias += "}";
  check_refused(attack(s, normal_s, "/v1/completions",
                       R"({"prompt":"Once upon a time","max_tokens":4,"logit_bias":)" + bias + "}"),
                "logit_bias", "vocabulary");
  std::string ids = "[";
  for (int i = 0; i < 100000; ++i) {
    if (i > 0)
      ids += ',';
    ids += std::to_string(i % 512);
  }
  ids += "]";
  check_refused(attack(s, normal_s, "/v1/completions",
                       R"({"prompt":"Once upon a time","max_tokens":4,"allowed_token_ids":)" + ids + "}"),
                "allowed_token_ids", "vocabulary");
  check_refused(attack(s, normal_s, "/v1/completions",
                       R"({"prompt":"Once upon a time","max_tokens":4,"stop_token_ids":)" + ids + "}"),
                "stop_token_ids", "vocabulary");
  check_refused(attack(s, normal_s, "/v1/completions",
                       R"({"prompt":"Once upon a time","max_tokens":4,"bad_words":)" +
                           string_list(5000, [](std::size_t i) { return numbered("w", i); }) + "}"),
                "bad_words", "--max-bad-words");
  check_peak_memory(s);
}
