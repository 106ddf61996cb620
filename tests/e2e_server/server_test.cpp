// `actorllm serve` end to end: the real binary on a free loopback port (--port 0, read back from its log), driven
// by a small blocking HTTP/1.1 client over raw sockets.
#include "test_paths.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

using steady = std::chrono::steady_clock;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in{p, std::ios::binary};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct http_reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_all(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0)
      return;  // the server may close early (e.g. 413); the reply tells
    sent += static_cast<std::size_t>(n);
  }
}

std::string request_text(const std::string& method, const std::string& target, const std::string& body,
                         const std::vector<std::string>& headers) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : headers)
    req += h + "\r\n";
  if (!body.empty() || method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return req + "\r\n" + body;
}

std::string dechunk(const std::string& raw) {
  std::string out;
  std::size_t pos = 0;
  for (;;) {
    std::size_t eol = raw.find("\r\n", pos);
    REQUIRE(eol != std::string::npos);
    std::size_t size = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    pos = eol + 2;
    if (size == 0)
      return out;
    out += raw.substr(pos, size);
    pos += size + 2;
  }
}

http_reply parse_reply(const std::string& raw) {
  http_reply r;
  std::size_t head_end = raw.find("\r\n\r\n");
  REQUIRE_MESSAGE(head_end != std::string::npos, "no complete HTTP head in: " << raw);
  std::istringstream head{raw.substr(0, head_end)};
  std::string line;
  std::getline(head, line);
  REQUIRE(line.rfind("HTTP/1.1 ", 0) == 0);
  r.status = std::stoi(line.substr(9, 3));
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    auto colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[name] = line.substr(colon + 2);
  }
  std::string body = raw.substr(head_end + 4);
  r.body = r.headers["transfer-encoding"] == "chunked" ? dechunk(body) : body;
  return r;
}

http_reply http(uint16_t port, const std::string& method, const std::string& target, const std::string& body = {},
                const std::vector<std::string>& headers = {}) {
  int fd = connect_to(port);
  send_all(fd, request_text(method, target, body, headers));
  std::string raw;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    raw.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return parse_reply(raw);
}

/// A running `actorllm serve` on stories260K; killed (if still running) on destruction.
class server {
 public:
  explicit server(const std::vector<std::string>& extra = {}) {
    log_ = test::make_temp_dir("e2e_server") / "server.log";
    std::vector<std::string> args{test::actorllm_binary().string(),
                                  "serve",
                                  test::model_dir("stories260K").string(),
                                  "--port",
                                  "0",
                                  "--served-model-name",
                                  "stories",
                                  "--shutdown-timeout",
                                  "5"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      std::FILE* f = std::freopen(log_.c_str(), "w", stderr);
      (void)f;
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // The log names the port once the socket listens; then /health answers.
    const auto deadline = steady::now() + 20s;
    const std::string marker = "Listening on http://127.0.0.1:";
    while (port_ == 0) {
      REQUIRE_MESSAGE(steady::now() < deadline, "server did not listen; log:\n" << read_file(log_));
      int status = 0;
      REQUIRE_MESSAGE(::waitpid(pid_, &status, WNOHANG) == 0, "server exited; log:\n" << read_file(log_));
      std::string text = read_file(log_);
      if (auto at = text.find(marker); at != std::string::npos && text.find('\n', at) != std::string::npos)
        port_ = static_cast<uint16_t>(std::stoi(text.substr(at + marker.size())));
      else
        std::this_thread::sleep_for(10ms);
    }
    while (http(port_, "GET", "/health").status != 200) {
      REQUIRE_MESSAGE(steady::now() < deadline, "/health never answered 200");
      std::this_thread::sleep_for(10ms);
    }
  }
  ~server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  /// Waits (bounded) for the process to exit; its exit status, or -1 when it did not exit in time.
  int wait_exit(std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (steady::now() >= deadline)
        return -1;
      std::this_thread::sleep_for(10ms);
    }
  }
  std::string log() const { return read_file(log_); }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

/// The golden greedy continuation of "Once upon a time" (the reference's output from BOS, minus the prompt).
std::string golden_continuation() {
  simdjson::dom::parser parser;
  auto doc = parser.load((test::model_dir("stories260K") / "reference" / "expected_outputs.json").string());
  std::string text{std::string_view(doc["greedy_from_bos"]["output_text"])};
  const std::string prompt = "Once upon a time";
  REQUIRE(text.rfind(prompt, 0) == 0);
  return text.substr(prompt.size());
}

/// Splits an SSE body into its `data:` payloads, checking the framing exactly; the last must be [DONE].
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    REQUIRE_MESSAGE(body.compare(pos, 6, "data: ") == 0, "bad SSE framing at " << pos << ": " << body.substr(pos));
    std::size_t end = body.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    std::string payload = body.substr(pos + 6, end - pos - 6);
    REQUIRE(payload.find('\n') == std::string::npos);
    out.push_back(payload);
    pos = end + 2;
  }
  REQUIRE(!out.empty());
  CHECK(out.back() == "[DONE]");
  return out;
}

std::string stream_text(const std::string& body, bool chat) {
  auto payloads = sse_payloads(body);
  std::string text;
  simdjson::dom::parser parser;
  for (std::size_t i = 0; i + 1 < payloads.size(); ++i) {
    simdjson::dom::element e;
    REQUIRE(parser.parse(payloads[i]).get(e) == simdjson::SUCCESS);
    auto choice = e["choices"].at(0);
    std::string_view piece;
    if (chat) {
      if (choice["delta"]["content"].get_string().get(piece) == simdjson::SUCCESS)
        text += piece;
    } else {
      REQUIRE(choice["text"].get_string().get(piece) == simdjson::SUCCESS);
      text += piece;
    }
  }
  return text;
}

std::string json_string(const std::string& body, const std::vector<std::string>& path_keys, std::size_t choice = 0) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  REQUIRE_MESSAGE(parser.parse(body).get(e) == simdjson::SUCCESS, "not JSON: " << body);
  for (const auto& k : path_keys)
    e = k == "#" ? e.at(choice).value() : e[k].value();
  return std::string{std::string_view(e)};
}

void check_openai_error(const http_reply& r, int status) {
  CHECK_MESSAGE(r.status == status, r.body);
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  REQUIRE_MESSAGE(parser.parse(r.body).get(e) == simdjson::SUCCESS, r.body);
  CHECK(e["error"]["message"].is_string());
  CHECK(e["error"]["type"].is_string());
  CHECK(e["error"]["param"].error() == simdjson::SUCCESS);
  CHECK(e["error"]["code"].error() == simdjson::SUCCESS);
}

std::optional<double> metric(const std::string& text, const std::string& series) {
  auto at = text.find("\n" + series + " ");
  if (at == std::string::npos)
    return std::nullopt;
  return std::stod(text.substr(at + series.size() + 2));
}

}  // namespace

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
        timeval tv{10, 0};
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
  server s;
  auto models = http(s.port(), "GET", "/v1/models");
  REQUIRE(models.status == 200);
  CHECK(json_string(models.body, {"data", "#", "id"}) == "stories");
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

/// Polls /metrics (bounded by 1 s) until `n` requests finished as aborted and none runs.
void expect_aborted_within_1s(const server& s, double n) {
  const std::string aborted = R"(actorllm:request_success_total{model_name="stories",finished_reason="abort"})";
  const std::string running = R"(actorllm:num_requests_running{model_name="stories"})";
  const auto deadline = steady::now() + 1s;
  for (;;) {
    auto m = http(s.port(), "GET", "/metrics").body;
    if (metric(m, aborted) == n && metric(m, running) == 0.0)
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
  reset_and_close(fd);
  expect_aborted_within_1s(s, 1.0);
  CHECK(http(s.port(), "GET", "/health").status == 200);
}

TEST_CASE("SIGTERM lets an in-flight stream finish, then exits 0") {
  server s;
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
