// `actorllm serve` end to end against clients that send what no HTTP library would: each bad request ends only its
// own connection, with its status (400, 413, 431), and the process keeps serving everyone else. The bytes go out
// through the HTTP fuzzer's raw client (tests/fuzz/raw_client.hpp), which reads while it writes and bounds every wait.
#include "fuzz/raw_client.hpp"
#include "server_harness.hpp"

#include <doctest/doctest.h>
#include "support/doctest_int_vector.hpp"

#include <sys/wait.h>

#include <string>
#include <vector>

using namespace actorllm;
using namespace actorllm::e2e;
using namespace std::chrono_literals;

namespace {

const std::string completion = R"({"prompt":"Once upon a time","max_tokens":4})";

/// Plays `pieces` on one connection and returns what came back; a hang or a badly framed answer fails the test.
fuzz::case_outcome play(const server& s, std::vector<std::string> pieces,
                        fuzz::client_ending ending = fuzz::client_ending::hold_open) {
  fuzz::fuzz_case c;
  c.pieces = std::move(pieces);
  c.ending = ending;
  fuzz::case_outcome r = fuzz::run_case(s.port(), c, 10s, {});
  CHECK_MESSAGE(r.problem.empty(), r.problem);
  return r;
}

/// The process is alive and answers a completion request.
void check_still_serving(server& s) {
  int status = 0;
  REQUIRE_MESSAGE(::waitpid(s.pid(), &status, WNOHANG) == 0, "the server exited; log:\n" << s.log());
  auto r = http(s.port(), "POST", "/v1/completions", completion);
  CHECK_MESSAGE(r.status == 200, r.body);
  CHECK(s.log().find("uncaught exception") == std::string::npos);
}

std::string post_head(const std::string& framing, bool close = false) {
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + framing + "\r\n" +
         (close ? "Connection: close\r\n" : "") + "\r\n";
}

const std::string chunked = "Transfer-Encoding: chunked";

}  // namespace

TEST_CASE("the issue's reproduction: a chunked request with a 70,000-byte trailer gets 431, the server lives on") {
  server s;
  // Exactly the report: no API key, body 2\r\n{}\r\n0\r\n, then X-T: and 70,000 x 'a'. It used to end the process
  // with "actorllm serve: error: field value too large", and every client's request with it.
  auto r = play(s, {post_head(chunked) + "2\r\n{}\r\n0\r\nX-T: " + std::string(70000, 'a') + "\r\n\r\n"});
  CHECK(r.statuses == std::vector<int>{431});
  CHECK(r.closed);
  // A value just over Beast's 65,533-byte ceiling fits the server's read buffer and reaches the parser, which throws.
  auto at_parser = play(s, {post_head(chunked) + "2\r\n{}\r\n0\r\nX-T: " + std::string(66000, 'a') + "\r\n\r\n"});
  CHECK(at_parser.statuses == std::vector<int>{431});
  check_still_serving(s);
  CHECK(s.log().find("field value too large") == std::string::npos);
}

TEST_CASE("a trailer or a chunk header that never ends gets 431 (the server holds a bounded buffer)") {
  server s;
  // 8 MiB sent without an end: the server answers once its buffer is full and drops the rest.
  auto trailer = play(s, {post_head(chunked) + "2\r\n{}\r\n0\r\nX-T: ", std::string(8 << 20, 'a')});
  CHECK(trailer.statuses == std::vector<int>{431});
  CHECK(trailer.closed);
  auto extension = play(s, {post_head(chunked) + "2;x=", std::string(8 << 20, 'e')});
  CHECK(extension.statuses == std::vector<int>{431});
  check_still_serving(s);
}

TEST_CASE("malformed request lines and chunk sizes get 400, heads over the limit 431, bodies over it 413") {
  server s{{"--max-body-bytes", "4096"}};
  struct bad_request {
    const char* what;
    std::string bytes;
    int status;
  };
  const std::vector<bad_request> table = {
      {"request line without a version", "POST /v1/completions\r\nHost: x\r\n\r\n", 400},
      {"request line of garbage", "\x01\x02\x03 / HTTP/1.1\r\n\r\n", 400},
      {"bad chunk size", post_head(chunked) + "zz\r\n{}\r\n0\r\n\r\n", 400},
      {"chunk size past 64 bits", post_head(chunked) + "fffffffffffffffffffff\r\n{}\r\n0\r\n\r\n", 400},
      {"header too large", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(16 * 1024, 'h') + "\r\n\r\n",
       431},
      {"Content-Length body too large", post_head("Content-Length: 5000") + std::string(5000, ' '), 413},
      {"chunked body too large",
       post_head(chunked) + "800\r\n" + std::string(2048, ' ') + "\r\n800\r\n" + std::string(2048, ' ') +
           "\r\n1\r\n \r\n0\r\n\r\n",
       413},
      // Far over the limit: the server answers at the head and drops the rest without reading it into memory.
      {"Content-Length of 64 MiB", post_head("Content-Length: 67108864") + std::string(1 << 20, ' '), 413},
  };
  for (const auto& bad : table) {
    INFO(bad.what);
    auto r = play(s, {bad.bytes});
    CHECK(r.statuses == std::vector<int>{bad.status});
    CHECK(r.closed);
  }
  check_still_serving(s);
}

TEST_CASE("truncated requests, errors on keep-alive connections and pipelined requests end only what they must") {
  server s;
  // A request cut short, then the client's side closed: 400; cut short and reset: nothing to answer.
  const std::string truncated = post_head("Content-Length: 100") + R"({"prompt":)";
  auto half = play(s, {truncated}, fuzz::client_ending::half_close);
  CHECK(half.statuses == std::vector<int>{400});
  play(s, {truncated}, fuzz::client_ending::reset);
  play(s, {post_head(chunked) + "10\r\n{\"pro"}, fuzz::client_ending::close_unread);

  // Keep-alive: an error answered by the API (404, 400) keeps the connection; a malformed request ends it, after
  // the answers owed before it.
  const std::string ok = post_head("Content-Length: " + std::to_string(completion.size())) + completion;
  const std::string bad_json = post_head("Content-Length: 9") + "{not json";
  auto kept = play(s, {"GET /no/such HTTP/1.1\r\nHost: x\r\n\r\n" + bad_json + ok +
                       "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"});
  CHECK(kept.statuses == std::vector<int>{404, 400, 200, 200});
  auto ended = play(s, {ok + "NOT HTTP AT ALL\r\n\r\n" + ok});
  CHECK(ended.statuses == std::vector<int>{200, 400});
  CHECK(ended.closed);

  // Pipelined: all sent at once, answered in order (a generation, a route error, a health check, a streamed
  // generation), the last one closing the connection.
  const std::string streamed = R"({"prompt":"Once upon a time","max_tokens":4,"stream":true})";
  auto piped = play(s, {ok + "GET /no/such HTTP/1.1\r\nHost: x\r\n\r\n" + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" +
                        post_head("Content-Length: " + std::to_string(streamed.size()), true) + streamed});
  CHECK(piped.statuses == std::vector<int>{200, 404, 200, 200});
  CHECK(piped.closed);
  check_still_serving(s);
}
