// Issue 30, item 2: SIGTERM ends `actorllm serve` within --shutdown-timeout in every state, with exit status 0 and
// nothing crashing on the way out: idle, streams running, non-streamed requests running, and the preprocessing
// threads busy with handlers that do not return. Before the fix a drain that ran out with a request in flight ended
// in SIGSEGV (the connection list died before the sessions that unhook themselves from it), and busy preprocessing
// threads held the exit until they finished (minutes) because the pool joined them.
#include "server_harness.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

using namespace actorllm::e2e;

namespace {

/// Time a stopping process gets beyond its --shutdown-timeout: the engine's own teardown (threads, KV cache) on a
/// 2-core machine busy with other tests.
constexpr auto margin = 3s;

/// Nothing in the log says a crash, an escaped exception or a sanitizer report.
void check_clean_log(const std::string& log) {
  for (const char* bad : {"uncaught", "terminate called", "AddressSanitizer", "runtime error:", "Segmentation",
                          "LeakSanitizer", "UndefinedBehaviorSanitizer"})
    CHECK_MESSAGE(log.find(bad) == std::string::npos, "the log says '" << bad << "':\n" << log);
}

/// SIGTERM, then the exit status within `timeout` + margin (-1: still running), and how long the exit took.
std::pair<int, std::chrono::milliseconds> terminate(server& s, std::chrono::milliseconds timeout) {
  const auto t0 = steady::now();
  REQUIRE(::kill(s.pid(), SIGTERM) == 0);
  const int status = s.wait_exit(timeout + margin);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0);
  MESSAGE("exit status " << status << " after " << took.count() << " ms (shutdown timeout " << timeout.count()
                         << " ms)");
  return {status, took};
}

/// Sends a generation request on a connection of its own and returns the connection (not read yet).
int start_request(uint16_t port, bool stream) {
  const int fd = connect_to(port);
  send_all(fd, request_text("POST", "/v1/completions",
                            std::string{R"({"prompt":"Once upon a time","max_tokens":400,"ignore_eos":true,)"} +
                                R"("stream":)" + (stream ? "true" : "false") + "}",
                            {}));
  return fd;
}

}  // namespace

TEST_CASE("attack: SIGTERM on an idle server with idle keep-alive connections exits 0 at once") {
  server s{{"--shutdown-timeout", "2"}};
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i)
    idle.push_back(connect_to(s.port()));  // connected, nothing sent
  const auto [status, took] = terminate(s, 2s);
  CHECK_MESSAGE(status == 0, s.log());
  CHECK(took < 2s + margin);
  check_clean_log(s.log());
  for (int fd : idle)
    ::close(fd);
}

TEST_CASE("attack: SIGTERM with streams running and --shutdown-timeout 0 exits 0, no crash (was SIGSEGV)") {
  // One sequence at a time: while the first stream runs, the others are surely still in flight at the signal.
  server s{{"--shutdown-timeout", "0", "--max-num-seqs", "1"}};
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i)
    fds.push_back(start_request(s.port(), true));
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos) {  // the first stream is under way
    const ssize_t n = ::recv(fds.front(), buf, sizeof buf, 0);
    REQUIRE(n > 0);
    got.append(buf, static_cast<std::size_t>(n));
  }
  const auto [status, took] = terminate(s, 0s);
  CHECK_MESSAGE(status == 0, s.log());
  CHECK(took < margin);
  check_clean_log(s.log());
  for (int fd : fds)
    ::close(fd);
}

TEST_CASE("attack: SIGTERM with non-streamed requests running and --shutdown-timeout 0 exits 0, no crash") {
  server s{{"--shutdown-timeout", "0", "--max-num-seqs", "1"}};
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i)
    fds.push_back(start_request(s.port(), false));
  const std::string running = R"(actorllm:num_requests_running{model_name="stories"})";
  const auto deadline = steady::now() + 10s;
  while (metric(http(s.port(), "GET", "/metrics").body, running) != 1.0 && steady::now() < deadline)
    std::this_thread::sleep_for(2ms);  // a bounded poll of the server's own gauge, not a sleep as synchronization
  REQUIRE(metric(http(s.port(), "GET", "/metrics").body, running) == 1.0);
  const auto [status, took] = terminate(s, 0s);
  CHECK_MESSAGE(status == 0, s.log());
  CHECK(took < margin);
  check_clean_log(s.log());
  for (int fd : fds)
    ::close(fd);
}

TEST_CASE("attack: SIGTERM while a drain runs out on a client that reads nothing exits 0 within the timeout") {
  // The drain's deadline, not a zero timeout: a streamed answer nobody reads keeps its connection busy past it.
  server s{{"--shutdown-timeout", "1", "--max-num-seqs", "1"}};
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i)
    fds.push_back(start_request(s.port(), true));
  const std::string running = R"(actorllm:num_requests_running{model_name="stories"})";
  const auto deadline = steady::now() + 10s;
  while (metric(http(s.port(), "GET", "/metrics").body, running) != 1.0 && steady::now() < deadline)
    std::this_thread::sleep_for(2ms);
  const auto [status, took] = terminate(s, 1s);
  CHECK_MESSAGE(status == 0, s.log());
  CHECK(took < 1s + margin);
  check_clean_log(s.log());
  for (int fd : fds)
    ::close(fd);
}

TEST_CASE("attack: SIGTERM with both preprocessing threads busy exits 0 within the timeout (was: until they end)") {
  // A hidden test hook stalls every handler 60 s before it runs, without polling its cancellation: a tokenizer or
  // chat template that takes minutes. Real requests that slow cost more than a gigabyte (a 15 MB prompt rendered
  // four times and tokenized: 4.7 s, 1.7 GB), so CI uses the hook (net/handler_pool.cpp).
  server s{{"--shutdown-timeout", "1"}, {"ACTORLLM_TEST_HANDLER_DELAY_MS=60000"}};
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i)  // two busy threads and one request queued behind them
    fds.push_back(start_request(s.port(), i == 0));
  // /health does not go through the preprocessing threads: it answers while they are busy.
  const auto t0 = steady::now();
  CHECK(http(s.port(), "GET", "/health").status == 200);
  CHECK(steady::now() - t0 < 1s);
  const auto [status, took] = terminate(s, 1s);
  CHECK_MESSAGE(status == 0, s.log());
  CHECK(took < 1s + margin);
  const std::string log = s.log();
  CHECK_MESSAGE(log.find("still running at the shutdown deadline") != std::string::npos, log);
  check_clean_log(log);
  for (int fd : fds)
    ::close(fd);
}

TEST_CASE("attack: a client that hangs up while its handler runs in preprocessing gets nothing submitted") {
  // The hook stalls each handler 1 s once a preprocessing thread has taken it: the client hangs up meanwhile. The
  // handler then sees its request cancelled (handler_pool::cancelled()) before it tokenizes or submits anything;
  // before, it submitted the request and the engine ran it until the abort that followed.
  server s{{}, {"ACTORLLM_TEST_HANDLER_DELAY_MS=1000"}};
  const int fd = start_request(s.port(), false);
  // Long enough for an idle preprocessing thread to take the request (a test assumption, not a synchronization: a
  // request still queued at the hang-up is skipped, which passes as well).
  std::this_thread::sleep_for(200ms);
  linger lg{1, 0};  // reset, as a killed client does
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  ::close(fd);
  // A request after it: its handler starts after the hung-up one's, so once it is answered that one has run.
  const auto r = http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4})");
  CHECK(r.status == 200);
  const std::string aborted = R"(actorllm:request_success_total{model_name="stories",finished_reason="abort"})";
  const std::string finished = R"(actorllm:request_success_total{model_name="stories",finished_reason="length"})";
  // An abort would show within a moment (bounded: nothing to wait for when all is well).
  const auto deadline = steady::now() + 1s;
  std::string m = http(s.port(), "GET", "/metrics").body;
  while (metric(m, aborted).value_or(0) == 0 && steady::now() < deadline)
    m = http(s.port(), "GET", "/metrics").body;
  CHECK(metric(m, aborted).value_or(0) == 0);
  CHECK(metric(m, finished).value_or(0) == 1);  // only the second request reached the engine
  CHECK(http(s.port(), "GET", "/health").status == 200);
}
