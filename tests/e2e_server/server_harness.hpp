// The harness of the `actorllm serve` end-to-end tests: the real binary on a free loopback port (--port 0, read
// back from its log), driven by a small blocking HTTP/1.1 client over raw sockets, plus checks of OpenAI's shapes.
#pragma once

#include "support/die_with_parent.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace actorllm::e2e {

using namespace std::chrono_literals;

using steady = std::chrono::steady_clock;

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in{p, std::ios::binary};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A reply as read from the socket. Incomplete (no full head, a bad status line, broken chunking, or nothing before
/// the timeout or the close): status 0, `error` says what, and `body` holds the raw bytes received.
struct http_reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  std::string error;                           // empty for a complete reply
};

/// How long a client waits for more of a reply: generous, since a loaded machine (two busy processes beside a server
/// of 16 rank threads on 2 cores) took 10 s and more for replies the quiet one gives in under a second. A server that
/// hangs still ends the wait, and ctest's timeout bounds the test.
inline constexpr int reply_timeout_seconds = 60;

/// A socket connected to the loopback `port` with the reply timeout set, or -1 (no doctest assertion: callable from
/// any thread).
inline int try_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  timeval tv{reply_timeout_seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// try_connect for the test's main thread: a failure fails the test.
inline int connect_to(uint16_t port) {
  const int fd = try_connect(port);
  REQUIRE_MESSAGE(fd >= 0, "cannot connect to 127.0.0.1:" << port);
  return fd;
}

inline void send_all(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0)
      return;  // the server may close early (e.g. 413); the reply tells
    sent += static_cast<std::size_t>(n);
  }
}

inline std::string request_text(const std::string& method, const std::string& target, const std::string& body,
                                const std::vector<std::string>& headers) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : headers)
    req += h + "\r\n";
  if (!body.empty() || method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return req + "\r\n" + body;
}

/// A chunked body's data, or nullopt when the chunk framing is broken or cut short.
inline std::optional<std::string> dechunk(const std::string& raw) {
  std::string out;
  std::size_t pos = 0;
  for (;;) {
    std::size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos)
      return std::nullopt;
    std::size_t size = 0;
    try {
      size = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    pos = eol + 2;
    if (size == 0)
      return out;
    if (pos + size > raw.size())
      return std::nullopt;
    out += raw.substr(pos, size);
    pos += size + 2;
  }
}

/// Parses a whole reply. No doctest assertion (callable from any thread): an incomplete one comes back with status 0
/// and `error` set, for the test's main thread to check.
inline http_reply parse_reply(const std::string& raw) {
  http_reply r;
  const auto incomplete = [&](std::string why) {
    http_reply bad;
    bad.error = std::move(why);
    bad.body = raw;
    return bad;
  };
  std::size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos)
    return incomplete("no complete HTTP head in: " + raw);
  std::istringstream head{raw.substr(0, head_end)};
  std::string line;
  std::getline(head, line);
  if (line.rfind("HTTP/1.1 ", 0) != 0 || line.size() < 12 || !std::isdigit(static_cast<unsigned char>(line[9])))
    return incomplete("not an HTTP/1.1 status line: " + line);
  r.status = std::stoi(line.substr(9, 3));
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    auto colon = line.find(':');
    if (colon == std::string::npos)
      return incomplete("a header line without a colon: " + line);
    std::string name = line.substr(0, colon);
    for (char& c : name)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::size_t value = std::min(line.size(), colon + 1);
    while (value < line.size() && line[value] == ' ')
      ++value;
    r.headers[name] = line.substr(value);
  }
  std::string body = raw.substr(head_end + 4);
  if (r.headers["transfer-encoding"] != "chunked") {
    r.body = std::move(body);
    return r;
  }
  std::optional<std::string> data = dechunk(body);
  if (!data)
    return incomplete("a chunked body cut short or badly framed (HTTP " + std::to_string(r.status) + ")");
  r.body = std::move(*data);
  return r;
}

/// One request on a fresh connection (Connection: close), read until the server closes it or the reply timeout
/// passes. No doctest assertion, so client threads may call it: a failure is a reply with status 0 and `error` set.
inline http_reply http(uint16_t port, const std::string& method, const std::string& target,
                       const std::string& body = {}, const std::vector<std::string>& headers = {}) {
  const int fd = try_connect(port);
  if (fd < 0) {
    http_reply r;
    r.error = "cannot connect to 127.0.0.1:" + std::to_string(port);
    return r;
  }
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

/// A running `actorllm serve` on stories260K (or `model`); killed (if still running) on destruction, its log's folder
/// removed.
class server {
 public:
  /// `env`: "NAME=value" entries set in the server's environment.
  explicit server(const std::vector<std::string>& extra = {}, const std::vector<std::string>& env = {},
                  const std::filesystem::path& model = {}) {
    dir_ = test::make_temp_dir("e2e_server");
    log_ = dir_ / "server.log";
    std::vector<std::string> args{test::actorllm_binary().string(),
                                  "serve",
                                  model.empty() ? test::model_dir("stories260K").string() : model.string(),
                                  "--port",
                                  "0",
                                  "--served-model-name",
                                  "stories"};
    // A short drain keeps a failed test from idling; a test of the drain itself sets its own.
    if (std::find(extra.begin(), extra.end(), "--shutdown-timeout") == extra.end())
      args.insert(args.end(), {"--shutdown-timeout", "5"});
    args.insert(args.end(), extra.begin(), extra.end());
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      test::die_with_parent(parent);
      std::FILE* f = std::freopen(log_.c_str(), "w", stderr);
      (void)f;
      for (const auto& e : env)
        ::putenv(const_cast<char*>(e.c_str()));  // the child's own copy of `env` lives until execv
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
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
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
  std::filesystem::path dir_;
  std::filesystem::path log_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

/// The golden greedy continuation of "Once upon a time" (the reference's output from BOS, minus the prompt).
inline std::string golden_continuation() {
  simdjson::dom::parser parser;
  auto doc = parser.load((test::model_dir("stories260K") / "reference" / "expected_outputs.json").string());
  std::string text{std::string_view(doc["greedy_from_bos"]["output_text"])};
  const std::string prompt = "Once upon a time";
  REQUIRE(text.rfind(prompt, 0) == 0);
  return text.substr(prompt.size());
}

/// Splits an SSE body into its `data:` payloads, checking the framing exactly; the last must be [DONE].
inline std::vector<std::string> sse_payloads(const std::string& body) {
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

inline std::string stream_text(const std::string& body, bool chat) {
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

inline std::string json_string(const std::string& body, const std::vector<std::string>& path_keys,
                               std::size_t choice = 0) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  REQUIRE_MESSAGE(parser.parse(body).get(e) == simdjson::SUCCESS, "not JSON: " << body);
  for (const auto& k : path_keys)
    e = k == "#" ? e.at(choice).value() : e[k].value();
  return std::string{std::string_view(e)};
}

inline void check_openai_error(const http_reply& r, int status) {
  CHECK_MESSAGE(r.status == status, r.body);
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  REQUIRE_MESSAGE(parser.parse(r.body).get(e) == simdjson::SUCCESS, r.body);
  CHECK(e["error"]["message"].is_string());
  CHECK(e["error"]["type"].is_string());
  CHECK(e["error"]["param"].error() == simdjson::SUCCESS);
  CHECK(e["error"]["code"].error() == simdjson::SUCCESS);
}

inline std::optional<double> metric(const std::string& text, const std::string& series) {
  auto at = text.find("\n" + series + " ");
  if (at == std::string::npos)
    return std::nullopt;
  return std::stod(text.substr(at + series.size() + 2));
}

}  // namespace actorllm::e2e
