// The only translation unit that compiles Boost.Beast and asio (see http_server.hpp). One I/O thread runs the
// accept loop and one coroutine per connection; the engine's delivery thread only locks a response_channel's
// mutex and posts a wake-up to this thread, so it never waits on a socket and no I/O thread ever blocks.
#include "net/http_server.hpp"

#include "net/cors.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <list>
#include <random>
#include <stdexcept>

namespace actorllm::net {

std::optional<std::string> http_request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name)
      return v;
  return std::nullopt;
}

std::function<void()> response_channel::wake_locked() { return waker_; }

void response_channel::respond(http_response r) {
  std::function<void()> wake;
  {
    std::lock_guard lock{mutex_};
    if (closed_)
      return;
    response_ = std::move(r);
    closed_ = true;
    wake = wake_locked();
  }
  if (wake)
    wake();
}

void response_channel::send_chunk(std::string chunk) {
  std::function<void()> wake;
  {
    std::lock_guard lock{mutex_};
    if (closed_)
      return;
    streaming_ = true;
    chunks_ += chunk;
    wake = wake_locked();
  }
  if (wake)
    wake();
}

void response_channel::close() {
  std::function<void()> wake;
  {
    std::lock_guard lock{mutex_};
    if (closed_)
      return;
    closed_ = true;
    wake = wake_locked();
  }
  if (wake)
    wake();
}

void response_channel::fail(http_response whole, std::string stream_tail) {
  std::function<void()> wake;
  {
    std::lock_guard lock{mutex_};
    if (closed_)
      return;
    if (stream_reported_)
      chunks_ += stream_tail;
    else
      response_ = std::move(whole);
    closed_ = true;
    wake = wake_locked();
  }
  if (wake)
    wake();
}

void response_channel::on_cancel(std::function<void()> f) {
  std::lock_guard lock{mutex_};
  cancel_ = std::move(f);
}

response_channel::batch response_channel::take() {
  std::lock_guard lock{mutex_};
  batch b;
  b.response = std::move(response_);
  response_.reset();
  if (streaming_ && !stream_reported_) {
    b.stream_started = true;
    stream_reported_ = true;
  }
  b.chunks = std::move(chunks_);
  chunks_.clear();
  b.closed = closed_;
  return b;
}

void response_channel::set_waker(std::function<void()> f) {
  std::lock_guard lock{mutex_};
  waker_ = std::move(f);
}

void response_channel::cancel() {
  std::function<void()> f;
  {
    std::lock_guard lock{mutex_};
    if (cancelled_)
      return;
    cancelled_ = true;
    closed_ = true;
    f = std::move(cancel_);
    cancel_ = nullptr;
    waker_ = nullptr;
  }
  if (f) {
    // cancel() runs in asio handlers and destructors on the I/O thread: the producer's exception must stop here.
    try {
      f();
    } catch (const std::exception& e) {
      log::error("http", "a request's cancel callback threw: {}", e.what());
    } catch (...) {
      log::error("http", "a request's cancel callback threw");
    }
  }
}

void server_stop::request_stop() {
  std::function<void()> wake;
  {
    std::lock_guard lock{mutex_};
    if (!wake_) {
      pending_ = true;
      return;
    }
    wake = wake_;
  }
  wake();
}

void server_stop::attach(std::function<void()> wake) {
  bool pending = false;
  {
    std::lock_guard lock{mutex_};
    wake_ = wake;
    pending = std::exchange(pending_, false);
  }
  if (pending)
    wake();
}

void server_stop::detach() {
  std::lock_guard lock{mutex_};
  wake_ = nullptr;
  pending_ = false;
}

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;
using error_code = boost::system::error_code;
using namespace std::chrono_literals;

constexpr std::string_view where = "http";

/// Lets the delivery thread post to the I/O thread only while the io_context exists.
struct post_gate {
  std::mutex mutex;
  asio::io_context* ctx = nullptr;

  void post(std::function<void()> f) {
    std::lock_guard lock{mutex};
    if (ctx != nullptr)
      asio::post(*ctx, std::move(f));
  }
};

enum class connection_state {
  waiting,  ///< for the first bytes of a request (a new connection, or an idle keep-alive one): may be closed for room
  reading,  ///< a request's head or body (bounded by the read timeout)
  busy,     ///< a request is being answered
};

struct connection {
  beast::tcp_stream* stream = nullptr;
  connection_state state = connection_state::waiting;
  bool evicted = false;                     ///< closed to make room for a newer one (no longer counted as open)
  std::weak_ptr<response_channel> channel;  ///< the request being answered, if any
};

/// Counts what the connection cap did, for a log line at most every few seconds rather than one per connection.
struct cap_report {
  std::chrono::steady_clock::time_point last{};
  uint64_t evicted = 0;  ///< idle connections closed to make room since the last line
  uint64_t refused = 0;  ///< connections answered 503 (every open one busy) since the last line
  uint64_t starved = 0;  ///< accepts that failed for want of file descriptors since the last line
};

/// The I/O thread's state. The members' order is the teardown's: `ctx` is destroyed after the I/O objects declared
/// below it and before `connections`, because destroying it destroys the coroutine frames of the sessions still
/// pending (a drain that ran out), and each of those unhooks its entry from `connections` on the way (the list once
/// died first, and a SIGTERM with a request running ended in SIGSEGV).
struct server_state {
  std::list<connection> connections;
  /// Connections counted against the cap: accepted ones, also before their session starts; not the evicted ones,
  /// which the list holds until their sessions end.
  std::size_t open = 0;
  std::size_t cap = 1;  ///< the effective connection cap
  bool stopping = false;
  bool tearing_down = false;  ///< ctx is being destroyed: a session's end must not call into it
  const server_options* options = nullptr;
  const http_handler* handler = nullptr;
  std::shared_ptr<post_gate> gate = std::make_shared<post_gate>();
  std::string busy_answer;  ///< the 503 a connection over the cap gets
  cap_report report;
  asio::io_context ctx;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> shutdown_timer;

  server_state() = default;
  ~server_state() { tearing_down = true; }  // runs before the members go (see above)
  server_state(const server_state&) = delete;
  server_state& operator=(const server_state&) = delete;

  void connection_done(std::list<connection>::iterator it) {
    if (!it->evicted)
      --open;
    connections.erase(it);
    if (stopping && connections.empty() && !tearing_down)
      ctx.stop();
  }
};

/// Keeps a session's entry in server_state::connections exactly as long as the session's coroutine frame. The entry
/// goes however the session ends, also when the frame is destroyed without resuming (an exception escaped an I/O
/// operation and run_http_server's loop caught it): shutdown then neither waits for nor touches a connection that is
/// gone, and the request it was answering is aborted.
class connection_entry {
 public:
  connection_entry(server_state& st, beast::tcp_stream& stream) : st_{st} {
    st_.connections.push_back({&stream, connection_state::waiting, false, {}});
    it_ = std::prev(st_.connections.end());  // (counted in `open` by the accept loop already)
  }
  ~connection_entry() {
    if (auto ch = it_->channel.lock())
      ch->cancel();
    st_.connection_done(it_);
  }
  connection_entry(const connection_entry&) = delete;
  connection_entry& operator=(const connection_entry&) = delete;

  connection& get() { return *it_; }

 private:
  server_state& st_;
  std::list<connection>::iterator it_;
};

std::string lower(std::string_view s) {
  std::string out{s};
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string error_body(std::string_view message, std::string_view type) {
  std::string out = R"({"error":{"message":")";
  out += message;  // callers pass fixed ASCII messages without quotes
  out += R"(","type":")";
  out += type;
  out += R"(","param":null,"code":null}})";
  return out;
}

std::string new_request_id() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return fmt::format("{:016x}{:016x}", gen(), gen());
}

http_request to_request(http::request<http::string_body>& req) {
  http_request r;
  r.method = std::string{req.method_string()};
  std::string_view target{req.target().data(), req.target().size()};
  r.target = std::string{target.substr(0, target.find('?'))};
  for (const auto& f : req)
    r.headers.emplace_back(lower(std::string_view{f.name_string().data(), f.name_string().size()}),
                           std::string{f.value()});
  r.body = std::move(req.body());
  return r;
}

awaitable<bool> write_whole(beast::tcp_stream& stream, const http_response& r, bool keep_alive,
                            std::chrono::seconds timeout) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  res.set(http::field::server, "actorllm");
  if (!r.content_type.empty())
    res.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers)
    res.set(k, v);
  res.keep_alive(keep_alive);
  res.body() = r.body;
  res.prepare_payload();
  error_code ec;
  stream.expires_after(timeout);
  co_await http::async_write(stream, res, asio::redirect_error(use_awaitable, ec));
  co_return !ec;
}

/// One exchange's facts for its response headers and the access log.
struct exchange {
  std::string request_id;  ///< x-request-id: the client's, or generated; echoed on the response
  int status = 0;          ///< what was sent
  header_list cors;        ///< CORS headers the request's Origin earns (see cors.hpp); on every answer
};

/// Writes what arrives on `ch` until it closes; false when the connection must close. `timer` wakes it.
awaitable<bool> deliver(server_state& st, beast::tcp_stream& stream, const std::shared_ptr<response_channel>& ch,
                        bool keep_alive, const std::shared_ptr<asio::steady_timer>& timer, exchange& ex) {
  std::weak_ptr<asio::steady_timer> weak_timer = timer;
  ch->set_waker([gate = st.gate, weak_timer] {
    gate->post([weak_timer] {
      if (auto t = weak_timer.lock())
        t->cancel();
    });
  });
  const auto write_timeout = st.options->read_timeout;
  bool streaming = false;
  for (;;) {
    response_channel::batch b = ch->take();
    if (b.response) {
      b.response->headers.emplace_back("x-request-id", ex.request_id);
      b.response->headers.insert(b.response->headers.end(), ex.cors.begin(), ex.cors.end());
      ex.status = b.response->status;
      co_return co_await write_whole(stream, *b.response, keep_alive, write_timeout) && keep_alive;
    }
    error_code ec;
    if (b.stream_started) {
      streaming = true;
      http::response<http::empty_body> res{http::status::ok, 11};
      res.set(http::field::server, "actorllm");
      res.set(http::field::content_type, "text/event-stream");
      res.set(http::field::cache_control, "no-cache");
      res.set("x-request-id", ex.request_id);
      for (const auto& [k, v] : ex.cors)
        res.set(k, v);
      ex.status = 200;
      res.keep_alive(keep_alive);
      res.chunked(true);
      http::response_serializer<http::empty_body> sr{res};
      stream.expires_after(write_timeout);
      co_await http::async_write_header(stream, sr, asio::redirect_error(use_awaitable, ec));
    }
    if (!ec && streaming && !b.chunks.empty()) {
      stream.expires_after(write_timeout);
      co_await asio::async_write(stream, http::make_chunk(asio::buffer(b.chunks)),
                                 asio::redirect_error(use_awaitable, ec));
    }
    if (ec) {
      ex.status = 499;  // the client closed the connection (nginx's code, for the access log)
      ch->cancel();     // the client is gone: abort its request now
      co_return false;
    }
    if (b.closed) {
      if (!streaming) {  // closed without a response: the producer gave up
        http_response r{
            500, "application/json", error_body("the request ended without a response", "InternalServerError"), {}};
        ex.status = r.status;
        co_await write_whole(stream, r, false, write_timeout);
        co_return false;
      }
      stream.expires_after(write_timeout);
      co_await asio::async_write(stream, http::make_chunk_last(), asio::redirect_error(use_awaitable, ec));
      if (ec)
        ch->cancel();
      co_return !ec && keep_alive;
    }
    if (b.stream_started || !b.chunks.empty())
      continue;  // more may have come while writing: take again before waiting (a wake-up during a write is lost)
    stream.expires_never();
    timer->expires_at(asio::steady_timer::time_point::max());
    co_await timer->async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

/// Answers one request. While the answer is pending, a peek at the socket notices a client that hangs up (even one
/// waiting for a non-streamed answer) and cancels the channel, which aborts the request.
awaitable<bool> answer(server_state& st, beast::tcp_stream& stream, std::shared_ptr<response_channel> ch,
                       bool keep_alive, exchange& ex) {
  auto timer = std::make_shared<asio::steady_timer>(st.ctx);
  auto watching = std::make_shared<bool>(true);
  auto peek = std::make_shared<char>();
  stream.socket().async_receive(asio::buffer(peek.get(), 1), tcp::socket::message_peek,
                                [ch, timer, watching, peek](error_code ec, std::size_t n) {
                                  if (!*watching || ec == asio::error::operation_aborted || (!ec && n > 0))
                                    return;  // answered already, or the client sent its next request early
                                  ch->cancel();
                                  timer->cancel();
                                });
  const bool again = co_await deliver(st, stream, ch, keep_alive, timer, ex);
  *watching = false;
  error_code ignored;
  stream.socket().cancel(ignored);  // ends the peek
  co_return again;
}

/// Whether the client has closed its side of the connection (or reset it). Asked of the socket itself: asio takes a
/// read that returned 0 bytes (answer()'s peek seeing a half-close) as the socket being drained, and then waits for
/// the next epoll edge before it reads again, which for an end already signalled never comes, so the next read would
/// sit until the idle timeout.
bool client_closed(tcp::socket& socket) {
  char byte = 0;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/// How reading one request ended: a request to answer, a silent close, or the error answer it earns.
enum class read_outcome {
  request,         ///< parser.is_done(): answer it
  closed,          ///< the client closed or reset between requests, or the server is shutting down: no answer
  head_too_large,  ///< 431: the head (or a chunk header or trailer) is over the limit
  body_too_large,  ///< 413
  malformed,       ///< 400: not HTTP/1.x as Beast parses it, or cut short by the client
};

using request_parser = http::request_parser<http::string_body>;

/// Reads one request into `parser` from `buffer` and then the socket, until `timed_out` (set by the caller's read
/// deadline, which also cancels the pending read). Our own loop rather than http::async_read, so
/// every parser failure is seen here: Beast bounds the head by header_limit but not a chunk header or the trailer,
/// which it buffers until their end (so `buffer` has a max_size: the overflow is 431), and basic_fields throws
/// std::length_error for a field over 64 KiB, which would escape async_read's composed operation and io_context::run
/// (a trailer of 70,000 bytes once ended the process).
awaitable<read_outcome> read_request(beast::tcp_stream& stream, beast::flat_buffer& buffer, request_parser& parser,
                                     const bool& timed_out) {
  for (;;) {
    if (buffer.size() > 0) {
      error_code ec;
      std::size_t used = 0;
      try {
        used = parser.put(buffer.data(), ec);
      } catch (const std::length_error&) {  // basic_fields: a field name or value too long to store
        co_return read_outcome::head_too_large;
      } catch (const std::exception&) {  // anything else the parser or the body's storage throws on bad input
        co_return read_outcome::malformed;
      }
      buffer.consume(used);
      if (parser.is_done())
        co_return read_outcome::request;
      if (ec == http::error::body_limit)
        co_return read_outcome::body_too_large;
      if (ec == http::error::header_limit)
        co_return read_outcome::head_too_large;
      if (ec && ec != http::error::need_more)
        co_return read_outcome::malformed;
      if (!ec && used > 0 && buffer.size() > 0)
        continue;  // the head is parsed (put stops there): the body may be buffered already
    }
    if (buffer.size() >= buffer.max_size())
      co_return read_outcome::head_too_large;  // a head, chunk header or trailer that does not end
    if (timed_out)
      co_return read_outcome::closed;  // the deadline cancelled a read that had completed already: no new one
    error_code ec;
    if (client_closed(stream.socket())) {
      ec = asio::error::eof;  // (after answer()'s peek saw the end, a read would wait for the deadline: see above)
    } else {
      const std::size_t room = std::min<std::size_t>(64 * 1024, buffer.max_size() - buffer.size());
      const std::size_t n =
          co_await stream.async_read_some(buffer.prepare(room), asio::redirect_error(use_awaitable, ec));
      buffer.commit(n);
    }
    if (ec == asio::error::eof) {  // everything buffered was offered to the parser already
      if (!parser.got_some())
        co_return read_outcome::closed;
      parser.put_eof(ec);
      co_return !ec && parser.is_done() ? read_outcome::request : read_outcome::malformed;  // a truncated request
    }
    if (ec)
      co_return read_outcome::closed;  // reset, the read deadline (the caller answers 408) or shutdown
  }
}

/// Ends a connection without losing what was written: FIN after the answer, then read and drop whatever the client
/// still sends until it closes (bounded by `bound`). Closing a socket with unread input would send an RST instead,
/// and the client's kernel may then drop the answer before the client reads it: a 413 or 431 sent while the client
/// is still sending, or the answers to pipelined requests before a malformed one (RFC 9112 §9.6, nginx's lingering
/// close).
awaitable<void> close_gracefully(beast::tcp_stream& stream, std::chrono::milliseconds bound) {
  error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (!ec) {
    stream.expires_after(bound);  // a client that never stops sending is cut off (then with an RST)
    std::array<char, 4096> sink;
    while (!ec && !client_closed(stream.socket()))  // (an end the peek saw already would not wake the read)
      co_await stream.async_read_some(asio::buffer(sink), asio::redirect_error(use_awaitable, ec));
  }
  stream.socket().close(ec);
}

awaitable<void> session(server_state& st, tcp::socket socket) {
  beast::tcp_stream stream{std::move(socket)};
  connection_entry entry{st, stream};
  connection& self = entry.get();
  // Bounded: what stays buffered is at most a head, a chunk header or a trailer being parsed (bodies go to the
  // parser as they come), plus a read's worth of what follows.
  beast::flat_buffer buffer{std::max<std::size_t>(st.options->max_header_bytes, 64 * 1024) + 8 * 1024};
  bool first = true;
  bool linger = false;  // the session ends on an answer the client has yet to read (see close_gracefully)
  try {
    while (!st.stopping) {
      request_parser parser;
      parser.header_limit(static_cast<std::uint32_t>(st.options->max_header_bytes));
      parser.body_limit(st.options->max_body_bytes);
      error_code ec;
      // Waiting for a request is bounded by the idle timeout (the read timeout for a new connection); once its
      // first bytes are here, the whole head and body must arrive within the read timeout, else 408. The idle wait
      // ends the connection silently (the tcp_stream's expiry closes the socket); the read deadline is a timer of
      // our own that cancels the read, so the socket stays open for the 408.
      if (buffer.size() == 0) {
        if (!first && client_closed(stream.socket()))
          break;  // it half-closed after its last request: no other can come
        stream.expires_after(first ? st.options->read_timeout : st.options->idle_timeout);
        self.state = connection_state::waiting;  // the connection cap may close it now (see accept_loop)
        const std::size_t n =
            co_await stream.async_read_some(buffer.prepare(4096), asio::redirect_error(use_awaitable, ec));
        buffer.commit(n);
        if (ec || self.evicted)
          break;  // the client closed, stayed idle too long, the server is shutting down, or needed the room
      }
      self.state = connection_state::reading;
      first = false;
      stream.expires_never();
      auto timed_out = std::make_shared<bool>(false);
      auto reading = std::make_shared<bool>(true);
      asio::steady_timer deadline{st.ctx};
      deadline.expires_after(st.options->read_timeout);
      deadline.async_wait([&stream, timed_out, reading](error_code tec) {
        if (tec || !*reading)
          return;  // the read finished first (then `stream` may be gone: not touched)
        *timed_out = true;
        error_code ignored;
        stream.socket().cancel(ignored);
      });
      const read_outcome outcome = co_await read_request(stream, buffer, parser, *timed_out);
      *reading = false;
      deadline.cancel();
      if (outcome != read_outcome::request) {
        http_response r;
        if (*timed_out)
          r = {408,
               "application/json",
               error_body("request not received within the read timeout", "RequestTimeout"),
               {}};
        else if (outcome == read_outcome::closed)
          break;
        else if (outcome == read_outcome::body_too_large)
          r = {413, "application/json", error_body("request body too large", "BadRequestError"), {}};
        else if (outcome == read_outcome::head_too_large)
          r = {431, "application/json", error_body("request headers too large", "BadRequestError"), {}};
        else
          r = {400, "application/json", error_body("malformed HTTP request", "BadRequestError"), {}};
        log::info(where, "- - {} (the request could not be read; the connection closes)", r.status);
        co_await write_whole(stream, r, false, st.options->read_timeout);
        linger = true;
        break;
      }
      self.state = connection_state::busy;
      auto& req = parser.get();
      const bool keep_alive = req.keep_alive();
      const auto started = std::chrono::steady_clock::now();
      exchange ex;
      if (auto given = req.find("x-request-id"); given != req.end() && !given->value().empty())
        ex.request_id = std::string{given->value()};
      else
        ex.request_id = new_request_id();
      const std::string method{req.method_string()};
      const std::string target{req.target()};
      std::shared_ptr<response_channel> ch;
      try {
        http_request request = to_request(req);
        if (!st.options->allowed_origins.empty()) {
          ex.cors = cors_headers(st.options->allowed_origins, request.header("origin"));
          if (auto preflight = cors_preflight(st.options->allowed_origins, request)) {
            ex.cors.clear();  // the preflight answer carries its own
            ch = std::make_shared<response_channel>();
            ch->respond(std::move(*preflight));
          }
        }
        if (!ch)
          ch = (*st.handler)(std::move(request));
      } catch (const std::exception& e) {
        log::error(where, "handler failed: {}", e.what());
      }
      if (!ch) {
        ch = std::make_shared<response_channel>();
        ch->respond({500, "application/json", error_body("internal error", "InternalServerError"), {}});
      }
      self.channel = ch;
      const bool again = co_await answer(st, stream, std::move(ch), keep_alive && !st.stopping, ex);
      self.channel.reset();
      log::info(where, "{} {} {} {:.1f}ms request_id={}", method, target, ex.status,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count(),
                ex.request_id);
      self.state = connection_state::reading;  // (waiting again once no pipelined request is buffered)
      if (!again) {
        linger = true;  // pipelined requests after this one may be unread
        break;
      }
    }
  } catch (const std::exception& e) {
    log::warning(where, "connection failed: {}", e.what());
    if (st.options->on_connection_error)
      st.options->on_connection_error(e.what());
  }
  try {
    if (linger) {
      co_await close_gracefully(stream, std::min<std::chrono::milliseconds>(st.options->read_timeout, 5s));
    } else {
      error_code ignored;
      stream.socket().close(ignored);
    }
  } catch (const std::exception& e) {  // not expected (errors are codes here); the entry must still go
    log::warning(where, "closing a connection failed: {}", e.what());
  }
}

/// Closes the oldest connection that waits for a request (an idle keep-alive one, or a new one that has sent
/// nothing yet), so that a newer one gets its room; false when every connection is reading or answering a request.
/// Its descriptor is free when this returns; its session ends when it next runs.
bool evict_idle(server_state& st) {
  for (connection& c : st.connections) {
    if (c.evicted || c.state != connection_state::waiting)
      continue;
    c.evicted = true;
    --st.open;
    error_code ignored;
    c.stream->socket().close(ignored);  // its pending read ends with operation_aborted
    ++st.report.evicted;
    return true;
  }
  return false;
}

/// Answers 503 on a connection over the cap and closes it at once: best effort (one non-blocking send, which a new
/// connection's empty send buffer takes whole), so that the connection neither waits in the backlog nor holds a
/// descriptor.
void refuse(tcp::socket& socket, const std::string& answer) {
  (void)::send(socket.native_handle(), answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  error_code ignored;
  socket.shutdown(tcp::socket::shutdown_send, ignored);
  socket.close(ignored);
}

/// accept() failed for want of a file descriptor (or kernel memory): the connection stays in the backlog and the
/// listening socket stays readable, so accepting again at once would spin.
bool out_of_descriptors(const error_code& ec) {
  if (ec.category() != boost::system::system_category())
    return false;
  const int v = ec.value();
  return v == EMFILE || v == ENFILE || v == ENOBUFS || v == ENOMEM;
}

/// One line at most every 10 s about what the connection cap did since the last one.
void report_cap(server_state& st) {
  const auto now = std::chrono::steady_clock::now();
  if (now - st.report.last < 10s)
    return;
  if (st.report.evicted + st.report.refused + st.report.starved == 0)
    return;
  log::warning(where,
               "Connection cap: {} open (limit {}, --max-connections); {} idle connection(s) closed to make room, {} "
               "refused with 503 (every open one busy), {} accept(s) out of file descriptors, since the last report",
               st.open, st.cap, st.report.evicted, st.report.refused, st.report.starved);
  st.report = {now, 0, 0, 0};
}

awaitable<void> accept_loop(server_state& st) {
  asio::steady_timer backoff{st.ctx};
  for (;;) {
    error_code ec;
    tcp::socket socket = co_await st.acceptor->async_accept(asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (st.stopping || !st.acceptor->is_open())
        co_return;
      if (ec == asio::error::connection_aborted)
        continue;  // that client gave up while it waited in the backlog
      if (out_of_descriptors(ec)) {
        ++st.report.starved;
        if (evict_idle(st)) {  // a descriptor came free: the next accept takes the waiting connection
          report_cap(st);
          continue;
        }
      } else {
        log::warning(where, "accept failed: {}", ec.message());
      }
      report_cap(st);
      // Waited for on the I/O thread's timer, not slept: everyone else's I/O goes on meanwhile.
      backoff.expires_after(100ms);
      co_await backoff.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    if (st.open >= st.cap && !evict_idle(st)) {
      refuse(socket, st.busy_answer);
      ++st.report.refused;
      report_cap(st);
      continue;
    }
    report_cap(st);
    ++st.open;
    socket.set_option(tcp::no_delay{true}, ec);
#ifdef TCP_QUICKACK
    int one = 1;
    ::setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
#endif
    asio::co_spawn(st.ctx, session(st, std::move(socket)), asio::detached);
  }
}

void begin_shutdown(server_state& st) {
  if (st.stopping) {  // a second signal: stop at once
    log::warning(where, "second signal: stopping now");
    if (st.options->on_shutdown)
      st.options->on_shutdown(std::chrono::steady_clock::now());
    st.ctx.stop();
    return;
  }
  st.stopping = true;
  log::info(where, "Shutting down: no new connections; waiting for {} connection(s)", st.connections.size());
  if (st.options->on_shutdown)
    st.options->on_shutdown(std::chrono::steady_clock::now() + st.options->shutdown_timeout);
  error_code ignored;
  st.acceptor->close(ignored);
  for (connection& c : st.connections)
    if (c.state != connection_state::busy && !c.evicted)
      c.stream->socket().cancel(ignored);  // idle keep-alive reads end now
  if (st.connections.empty()) {
    st.ctx.stop();
    return;
  }
  st.shutdown_timer.emplace(st.ctx);
  st.shutdown_timer->expires_after(st.options->shutdown_timeout);
  st.shutdown_timer->async_wait([&st](error_code ec) {
    if (!ec) {
      log::warning(where, "shutdown timeout: {} connection(s) still open", st.connections.size());
      st.ctx.stop();
    }
  });
}

/// Files the process has open now (0 when /proc cannot tell).
std::size_t count_open_fds() {
  std::error_code ec;
  std::size_t n = 0;
  for (std::filesystem::directory_iterator it{"/proc/self/fd", ec}, end; !ec && it != end; it.increment(ec))
    ++n;
  return ec ? 0 : n;
}

}  // namespace

std::size_t effective_connection_cap(std::size_t requested, std::size_t fd_limit, std::size_t fds_open) {
  constexpr std::size_t reserve = 64;  // the engine's own later files: worker sockets, model files, /proc reads
  const std::size_t room = fd_limit > fds_open + reserve ? fd_limit - fds_open - reserve : 1;
  return std::max<std::size_t>(1, std::min(requested, room));
}

int run_http_server(const server_options& given, const http_handler& handler) {
  server_options options = given;
  // Hidden knob for tests of slow clients (no flag): the read timeout in seconds.
  if (const char* env = std::getenv("ACTORLLM_HTTP_READ_TIMEOUT_S"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long seconds = std::strtol(env, &end, 10);
    if (end != nullptr && *end == '\0' && seconds > 0)
      options.read_timeout = std::chrono::seconds{seconds};
    else
      log::warning(where, "ignoring ACTORLLM_HTTP_READ_TIMEOUT_S='{}' (want whole seconds > 0)", env);
  }
  server_state st;
  st.options = &options;
  st.handler = &handler;
  {
    rlimit nofile{};
    const std::size_t fd_limit = ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY
                                     ? static_cast<std::size_t>(nofile.rlim_cur)
                                     : std::numeric_limits<std::size_t>::max();
    const std::size_t fds_open = count_open_fds();
    st.cap = effective_connection_cap(options.max_connections, fd_limit, fds_open);
    if (st.cap < options.max_connections)
      log::warning(where,
                   "At most {} connections at once: --max-connections {} does not fit RLIMIT_NOFILE {} beside the {} "
                   "files open now (raise `ulimit -n` for more)",
                   st.cap, options.max_connections, fd_limit, fds_open);
    else
      log::info(
          where, "At most {} connections at once (--max-connections; RLIMIT_NOFILE {})", st.cap,
          fd_limit == std::numeric_limits<std::size_t>::max() ? std::string{"unlimited"} : std::to_string(fd_limit));
    const std::string body = error_body(fmt::format("the server has {} connections open, its limit "
                                                    "(--max-connections): retry later",
                                                    st.cap),
                                        "ServiceUnavailableError");
    st.busy_answer = fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nServer: actorllm\r\nContent-Type: application/json\r\nRetry-After: "
        "1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
        body.size(), body);
  }
  {
    std::lock_guard lock{st.gate->mutex};
    st.gate->ctx = &st.ctx;
  }
  error_code ec;
  auto address = asio::ip::make_address(options.host, ec);
  if (ec)
    throw std::runtime_error("--host: '" + options.host + "' is not an IP address");
  tcp::endpoint endpoint{address, options.port};
  st.acceptor.emplace(st.ctx);
  st.acceptor->open(endpoint.protocol(), ec);
  if (!ec)
    st.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec)
    st.acceptor->bind(endpoint, ec);
  if (!ec)
    st.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error("cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " +
                             ec.message());
  const uint16_t port = st.acceptor->local_endpoint().port();

  asio::signal_set signals{st.ctx, SIGINT, SIGTERM};
  std::function<void(error_code, int)> on_signal = [&](error_code sec, int) {
    if (sec)
      return;
    begin_shutdown(st);
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);

  if (options.stop)
    options.stop->attach([gate = st.gate, &st] { gate->post([&st] { begin_shutdown(st); }); });
  struct detach_stop {
    server_stop* stop;
    ~detach_stop() {
      if (stop != nullptr)
        stop->detach();
    }
  } detach_on_return{options.stop.get()};

  asio::co_spawn(st.ctx, accept_loop(st), asio::detached);
  log::info(where, "Listening on http://{}:{}", options.host, port);
  if (options.on_listening)
    options.on_listening(port);
  // Sessions catch what they can, but an exception thrown inside an asio or Beast composed operation surfaces here,
  // out of run(). It belongs to one connection, whose coroutine is then destroyed without resuming (its
  // connection_entry lets go of it): log it and go on serving everyone else.
  for (;;) {
    try {
      st.ctx.run();
      break;
    } catch (const std::exception& e) {
      log::error(where, "a connection failed with an uncaught exception (the server goes on): {}", e.what());
      if (options.on_connection_error)
        options.on_connection_error(e.what());
    } catch (...) {
      log::error(where, "a connection failed with an uncaught exception (the server goes on)");
      if (options.on_connection_error)
        options.on_connection_error("a non-standard exception");
    }
  }
  {
    std::lock_guard lock{st.gate->mutex};
    st.gate->ctx = nullptr;
  }
  if (!st.connections.empty())
    log::warning(where, "Closing {} connection(s) the drain left open; their requests are cancelled",
                 st.connections.size());
  // `st` goes next: its io_context first, which destroys the sessions still pending (each cancels its request and
  // leaves the connection list, which is still there), then the list.
  log::info(where, "Server stopped");
  return 0;
}

}  // namespace actorllm::net
