// The HTTP/1.1 server under `actorllm serve`: Boost.Beast on asio C++20 coroutines, kept out of this header so
// only net/http_server.cpp compiles Beast. Handlers see plain request/response values and answer through a
// response_channel, which any thread (actorllm's delivery thread included) may feed without blocking.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actorllm::net {

/// One parsed request. Header names are lower-case.
struct http_request {
  std::string method;
  std::string target;  ///< the path, without the query string
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  /// The first header named `name` (lower-case), or nullopt.
  std::optional<std::string> header(std::string_view name) const;
};

/// A complete (non-streamed) response.
struct http_response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  ///< extra headers (e.g. Retry-After)
};

/// How a handler answers: either one whole response, or a stream of chunks (a 200 text/event-stream response that
/// starts with the first chunk), then close(). Producers call from any thread; the connection consumes.
class response_channel {
 public:
  /// Sends a whole response; the channel is closed afterwards.
  void respond(http_response r);
  /// Appends a stream chunk (the first one starts the event-stream response).
  void send_chunk(std::string chunk);
  /// Ends the stream.
  void close();
  /// Ends with an error: `whole` when nothing was sent yet, else `stream_tail` appended to the started stream.
  void fail(http_response whole, std::string stream_tail);
  /// What the producer does when the client is gone (e.g. abort the request). Set before the handler returns. It runs
  /// on the I/O thread and must not throw (an exception is logged and dropped).
  void on_cancel(std::function<void()> f);

  /// Consumer side: what arrived since the last take.
  struct batch {
    std::optional<http_response> response;  ///< a whole response
    bool stream_started = false;            ///< chunks follow (the first take that sees one sets this)
    std::string chunks;
    bool closed = false;
  };
  batch take();
  /// Called (from the producer's thread) after each respond/send_chunk/close; must not block.
  void set_waker(std::function<void()> f);
  /// The client went away: runs the cancel callback once.
  void cancel();

 private:
  std::function<void()> wake_locked();
  std::mutex mutex_;
  std::optional<http_response> response_;
  std::string chunks_;
  bool streaming_ = false;
  bool stream_reported_ = false;
  bool closed_ = false;
  bool cancelled_ = false;
  std::function<void()> waker_;
  std::function<void()> cancel_;
};

using http_handler = std::function<std::shared_ptr<response_channel>(http_request)>;

/// Stops a running run_http_server from any thread, as SIGTERM does: the first request drains (no new connections,
/// in-flight requests finish within shutdown_timeout), a later one stops at once. For a server that runs on a thread
/// of a bigger program (tests, fuzzing), where a signal would reach the whole process.
class server_stop {
 public:
  /// Asks the server to stop. Thread-safe and non-blocking; one made before the server runs counts when it starts.
  void request_stop();

  /// run_http_server's side: `wake` runs for each later request (and once now if one is pending). It must not block.
  void attach(std::function<void()> wake);
  /// run_http_server's side, before it returns: requests from now on wait for a later attach.
  void detach();

 private:
  std::mutex mutex_;
  bool pending_ = false;
  std::function<void()> wake_;
};

struct server_options {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  ///< 0: any free port (the log and on_listening give the actual one)
  std::size_t max_header_bytes = 8 * 1024;
  std::size_t max_body_bytes = 16u << 20;
  /// Once a request's first bytes arrive, its head and body must follow within this (else 408 and the connection
  /// closes); also bounds each write of an answer (a client that stops reading is cut off and its request
  /// aborted). The hidden environment variable ACTORLLM_HTTP_READ_TIMEOUT_S (whole seconds) overrides it.
  std::chrono::seconds read_timeout{30};
  std::chrono::seconds idle_timeout{60};  ///< a keep-alive connection with no request is closed after this
  std::chrono::milliseconds shutdown_timeout{10000};
  /// --max-connections: the most connections open at once. The server takes the smaller of this and what
  /// RLIMIT_NOFILE leaves beside the files the process has open already (and a reserve for the engine's own), and
  /// logs it. A connection beyond it closes the oldest one waiting for a request (an idle keep-alive, or a new one
  /// that has sent nothing yet) to make room; when every open connection is busy with a request, the newcomer gets
  /// 503 with Retry-After and is closed at once, so none waits in the listen backlog.
  std::size_t max_connections = 1024;
  /// --allowed-origins: CORS origins answered with Access-Control-Allow-Origin ("*": any); empty: no CORS headers.
  std::vector<std::string> allowed_origins;
  std::function<void(uint16_t port)> on_listening;  ///< called once the socket listens
  std::shared_ptr<server_stop> stop;                ///< a way to stop besides SIGINT/SIGTERM; null: signals only
  /// Called on the I/O thread with the reason when an exception ends a connection (it is logged as well). None is
  /// expected whatever a client sends, so tests and the fuzzer count them.
  std::function<void(const std::string& what)> on_connection_error;
  /// Called on the I/O thread when the drain begins (the first SIGINT/SIGTERM or server_stop), with the time it ends
  /// at the latest: in-flight requests get until then, and whatever the caller stops after run_http_server returns
  /// (handler threads) should not outlast it either. A second signal, which stops at once, calls it again with now.
  std::function<void(std::chrono::steady_clock::time_point deadline)> on_shutdown;
};

/// The connection cap run_http_server uses for `requested` (server_options::max_connections) when the process may
/// open `fd_limit` files (RLIMIT_NOFILE's soft limit) and has `fds_open` open now: requested, but at most
/// fd_limit - fds_open - a reserve of 64 for the files the engine opens later (and at least 1).
std::size_t effective_connection_cap(std::size_t requested, std::size_t fd_limit, std::size_t fds_open);

/// Serves `handler` until SIGINT or SIGTERM (or options.stop), then stops accepting, lets in-flight requests finish
/// (bounded by shutdown_timeout) and returns 0. Throws std::runtime_error when it cannot listen. Nothing a client
/// sends ends it: a request that cannot be parsed gets 400, 408, 413 or 431 and its connection closes. When the
/// drain runs out, the connections still open are closed (their requests cancelled) before it returns; nothing of
/// the server is touched after that, whatever still feeds their channels.
int run_http_server(const server_options& options, const http_handler& handler);

}  // namespace actorllm::net
