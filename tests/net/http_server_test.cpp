// run_http_server in this process (tests/fuzz/test_server.hpp), driven over raw sockets: every kind of bad request
// gets its status and ends only its own connection, the server keeps serving, and server_stop stops it without a
// signal. The cases that reach the parser's throwing and buffer-limit paths are tagged [asan] (CI runs them under
// ASan+UBSan).
#include "fuzz/raw_client.hpp"
#include "fuzz/test_server.hpp"

#include <doctest/doctest.h>
#include "support/doctest_int_vector.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace actorllm::fuzz;
using namespace std::chrono_literals;

namespace {

constexpr auto bound = 5s;

/// Plays `pieces` on one connection, half-closes, and returns what came back (no hang, well framed: checked).
case_outcome play(const test_server& s, std::vector<std::string> pieces,
                  client_ending ending = client_ending::half_close) {
  fuzz_case c;
  c.pieces = std::move(pieces);
  c.ending = ending;
  case_outcome r = run_case(s.port(), c, bound, {});
  CHECK_MESSAGE(r.problem.empty(), r.problem);
  return r;
}

/// The server is alive, answers a valid request, and no connection ended on an exception.
void check_still_serving(const test_server& s) {
  std::string why;
  CHECK_MESSAGE(probe(s.port(), "/json", bound, why) == 200, why);
  CHECK(s.running());
  CHECK(s.failure().empty());
  CHECK(s.connection_errors() == 0);
}

const std::string chunked_head =
    "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n";

std::vector<int> statuses(std::initializer_list<int> l) { return l; }

/// A blocking loopback connection to `port` (receives time out after 5 s); -1 when it cannot connect.
int connect_local(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  timeval tv{5, 0};
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

/// Receives on `fd` until `text` arrived, the peer closed, or 5 s passed; what arrived.
std::string receive_until(int fd, std::string_view text) {
  std::string got;
  char buf[4096];
  while (got.find(text) == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

}  // namespace

TEST_CASE("run_http_server: a trailer field too long for Beast gets 431 and the server goes on [asan]") {
  test_server s;
  // 70,000 bytes is the reproduction (it overflows the bounded read buffer); 66,000 fits the buffer and makes
  // basic_fields throw std::length_error ("field value too large"), which once ended the process.
  for (std::size_t n : {std::size_t{66000}, std::size_t{65534}, std::size_t{70000}}) {
    INFO("trailer value of " << n << " bytes");
    auto r = play(s, {chunked_head + "2\r\n{}\r\n0\r\nX-T: " + std::string(n, 'a') + "\r\n\r\n"});
    CHECK(r.statuses == statuses({431}));
    CHECK(r.closed);
    check_still_serving(s);
  }
  // Just under the limit it is an ordinary trailer.
  auto ok = play(s, {chunked_head + "2\r\n{}\r\n0\r\nX-T: " + std::string(65000, 'a') + "\r\n\r\n"});
  CHECK(ok.statuses == statuses({200}));
  CHECK(s.stop() < 3s);  // no connection was left behind
}

TEST_CASE(
    "run_http_server: a trailer or chunk header that never ends gets 431 once the bounded buffer is full [asan]") {
  test_server s;
  // 4 MiB, far past any buffer the server allows: without a bound it would all be held (and more, for ever).
  auto trailer = play(s, {chunked_head + "2\r\n{}\r\n0\r\nX-T: ", std::string(4 << 20, 'a')}, client_ending::hold_open);
  CHECK(trailer.statuses == statuses({431}));
  CHECK(trailer.closed);
  auto extension = play(s, {chunked_head + "2;ext=", std::string(4 << 20, 'e')}, client_ending::hold_open);
  CHECK(extension.statuses == statuses({431}));
  CHECK(extension.closed);
  check_still_serving(s);
  CHECK(s.stop() < 3s);
}

TEST_CASE("run_http_server: malformed requests get 400, oversized heads 431, oversized bodies 413 [asan]") {
  test_server s;  // 8 KiB heads, 4 KiB bodies
  struct bad_request {
    const char* what;
    std::string bytes;
    int status;
  };
  const std::vector<bad_request> table = {
      {"request line without a version", "GET /json\r\nHost: x\r\n\r\n", 400},
      {"binary garbage", std::string{"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11}, 400},
      {"bad version", "GET /json HTTP/9.9\r\nHost: x\r\n\r\n", 400},
      {"bad chunk size", chunked_head + "zz\r\n{}\r\n0\r\n\r\n", 400},
      {"chunk size overflow", chunked_head + "fffffffffffffffffffff\r\n{}\r\n0\r\n\r\n", 400},
      {"chunk data longer than its size", chunked_head + "2\r\n{}xx\r\n0\r\n\r\n", 400},
      {"Content-Length not a number", "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400},
      {"two different Content-Lengths",
       "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400},
      {"Content-Length and chunked",
       "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n" + chunked_head.substr(chunked_head.find("Transfer")) +
           "2\r\n{}\r\n0\r\n\r\n",
       400},
      {"header without a colon", "GET /json HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", 400},
      {"header too large", "GET /json HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(9000, 'h') + "\r\n\r\n", 431},
      {"request line too large", "GET /" + std::string(9000, 'p') + " HTTP/1.1\r\nHost: x\r\n\r\n", 431},
      {"Content-Length over the body limit",
       "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'b'), 413},
      {"chunked body over the body limit",
       chunked_head + "1000\r\n" + std::string(4096, 'b') + "\r\n10\r\n" + std::string(16, 'b') + "\r\n0\r\n\r\n", 413},
  };
  for (const auto& bad : table) {
    INFO(bad.what);
    auto r = play(s, {bad.bytes});
    CHECK(r.statuses == statuses({bad.status}));
    CHECK(r.closed);
  }
  check_still_serving(s);
  CHECK(s.stop() < 3s);
}

TEST_CASE("run_http_server: a truncated request gets 400 on a half-close, and a client that vanishes costs nothing") {
  test_server s;
  const std::string request = "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":";
  auto half = play(s, {request});
  CHECK(half.statuses == statuses({400}));
  CHECK(half.closed);
  play(s, {request}, client_ending::reset);
  play(s, {request.substr(0, 20)}, client_ending::close_unread);
  play(s, {chunked_head + "2\r\n{}\r\n"}, client_ending::reset);
  // Held open instead: 408 after the read timeout (1 s here).
  auto held = play(s, {request}, client_ending::hold_open);
  CHECK(held.statuses == statuses({408}));
  check_still_serving(s);
  CHECK(s.stop() < 3s);
}

TEST_CASE("run_http_server: pipelined requests are answered in order, and an error ends the connection after them") {
  test_server s;
  const std::string get = "GET /json HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string late = "GET /late HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string stream = "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string big = "GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string missing = "GET /no/such HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string last = "GET /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  // Held open: a half-close would read as the client hanging up, which aborts what is not answered yet (/late).
  auto r = play(s, {get + late + stream + missing + last}, client_ending::hold_open);
  CHECK(r.statuses == statuses({200, 200, 200, 404, 200}));
  CHECK(r.closed);
  // Keep-alive holds across answers; the malformed request after them gets 400 and the connection closes, and what
  // was answered before still arrives whole (256 KiB from /big, written while unread input waits: no reset).
  auto after_error =
      play(s, {get + big + "GET\x01 /json HTTP/1.1\r\n\r\n" + get + std::string(8000, 'x')}, client_ending::hold_open);
  CHECK(after_error.statuses == statuses({200, 200, 400}));
  CHECK(after_error.closed);
  // The same, one byte at a time.
  fuzz_case slow;
  const std::string bytes = get + "BAD REQUEST\r\n\r\n";
  for (char ch : bytes)
    slow.pieces.emplace_back(1, ch);
  slow.slow = true;
  slow.ending = client_ending::hold_open;
  auto trickled = run_case(s.port(), slow, bound, {});
  CHECK_MESSAGE(trickled.problem.empty(), trickled.problem);
  CHECK(trickled.statuses == statuses({200, 400}));
  check_still_serving(s);
  CHECK(s.stop() < 3s);
}

TEST_CASE("run_http_server: answers owed before a malformed request reach a slow reader whole (no reset)") {
  test_server s;
  // A client with a small receive window: when the server has handed /big's last bytes to the kernel, most of them
  // still wait in its send queue. Closing then, with the client's unread bytes in the receive queue, would send an
  // RST and drop that queue; the server closes gracefully instead (FIN, then drops input until the client closes).
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(s.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string bytes = "GET /big HTTP/1.1\r\nHost: x\r\n\r\nNOT HTTP\r\n\r\n" + std::string(16000, 'x');
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  std::string raw;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;  // the end, a reset, or (after 10 s) a hang: the check below tells
    raw.append(buf, static_cast<std::size_t>(n));
    // A slow reader keeps the server's send queue full (pacing, not synchronisation: the answer must arrive whole
    // however fast the client reads; reading slowly only makes a reset, if there were one, lose data every time).
    std::this_thread::sleep_for(1ms);
  }
  ::close(fd);
  std::vector<int> got;
  bool last_closes = false;
  std::string problem;
  const std::size_t complete = parse_responses(raw, true, got, last_closes, problem);
  CHECK_MESSAGE(problem.empty(), problem);
  CHECK_MESSAGE(complete == raw.size(), "received " << raw.size() << " bytes, complete up to " << complete);
  CHECK(got == statuses({200, 400}));
  check_still_serving(s);
  CHECK(s.stop() < 3s);
}

TEST_CASE("run_http_server: a client that half-closes gets its answer and then the connection's end at once") {
  auto options = test_server_options();
  options.idle_timeout = 60s;  // far past the client's bound: only closing on the half-close passes
  test_server s{options};
  // Answered at once, then the client's end is seen (it used to wait out the idle timeout in CLOSE_WAIT: asio does not
  // read again after a peek saw the end, until an epoll edge that never comes).
  auto sync = play(s, {"GET /json HTTP/1.1\r\nHost: x\r\n\r\n"});
  CHECK(sync.statuses == statuses({200}));
  CHECK(sync.closed);
  auto two = play(s, {"GET /json HTTP/1.1\r\nHost: x\r\n\r\nGET /no/such HTTP/1.1\r\nHost: x\r\n\r\n"});
  CHECK(two.statuses == statuses({200, 404}));
  CHECK(two.closed);
  // A request cut short after an answer: 400 at once, not 408 after the read timeout.
  auto cut = play(s, {"GET /json HTTP/1.1\r\nHost: x\r\n\r\nGET /json HTTP/1.1\r\nHo"});
  CHECK(cut.statuses == statuses({200, 400}));
  CHECK(cut.closed);
  // Answered later: the half-close reads as a hang-up, which aborts the request (the server's design, as nginx's).
  auto late = play(s, {"GET /late HTTP/1.1\r\nHost: x\r\n\r\n"});
  CHECK(late.closed);
  check_still_serving(s);
  CHECK(s.stop() < 3s);
}

TEST_CASE("run_http_server: a handler that throws gets 500 and a cancel callback that throws is contained") {
  test_server s;
  auto thrown = play(s, {"GET /throw HTTP/1.1\r\nHost: x\r\n\r\nGET /json HTTP/1.1\r\nHost: x\r\n\r\n"});
  CHECK(thrown.statuses == statuses({500, 200}));
  auto dropped = play(s, {"GET /drop HTTP/1.1\r\nHost: x\r\n\r\n"});
  CHECK(dropped.statuses == statuses({500}));
  // The client resets while its stream runs: the server cancels the channel, whose callback throws.
  for (int i = 0; i < 20; ++i)
    play(s, {"GET /cancel-throws HTTP/1.1\r\nHost: x\r\n\r\n"}, client_ending::reset);
  check_still_serving(s);
  CHECK(s.stop() < 3s);
}

TEST_CASE("server_stop stops run_http_server without a signal, also when requested before it runs") {
  auto run_with = [](const std::shared_ptr<net::server_stop>& stop) {
    net::server_options o = test_server_options();
    o.stop = stop;
    auto done = std::make_shared<std::promise<int>>();
    auto result = done->get_future();
    std::thread t{[o, done] {
      try {
        done->set_value(net::run_http_server(o, [](net::http_request) {
          auto ch = std::make_shared<net::response_channel>();
          ch->respond({200, "text/plain", "ok", {}});
          return ch;
        }));
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    }};
    return std::pair{std::move(t), std::move(result)};
  };
  auto finish = [](std::thread& t, std::future<int>& result, net::server_stop& stop) {
    const bool returned = result.wait_for(10s) == std::future_status::ready;
    CHECK_MESSAGE(returned, "run_http_server did not return within 10 s of the stop");
    if (!returned) {  // a second request stops at once: the test fails instead of hanging
      stop.request_stop();
    }
    t.join();
    if (returned)
      CHECK(result.get() == 0);
  };
  {
    auto stop = std::make_shared<net::server_stop>();
    stop->request_stop();  // before the server exists
    auto [t, result] = run_with(stop);
    finish(t, result, *stop);
  }
  {
    // A running server, stopped from this thread; it answered before.
    test_server s;
    std::string why;
    CHECK(probe(s.port(), "/json", bound, why) == 200);
    CHECK(s.stop() < 3s);
    CHECK_FALSE(s.running());
    CHECK(s.failure().empty());
  }
}

TEST_CASE("run_http_server: a stop that runs out with requests in flight frees nothing they still use [asan]") {
  // The SIGSEGV: a drain that runs out (here a zero timeout) while requests are answered. The sessions still
  // pending are destroyed with the io_context, and each unhooks itself from the connection list, which used to be
  // gone by then. Afterwards the producer (the engine's delivery thread) still feeds their channels.
  struct held_requests {
    std::mutex mutex;
    std::vector<std::shared_ptr<net::response_channel>> channels;
    std::atomic<int> cancelled{0};
  };
  auto held = std::make_shared<held_requests>();
  net::server_options o = test_server_options();
  o.shutdown_timeout = 0ms;
  o.stop = std::make_shared<net::server_stop>();
  auto listening = std::make_shared<std::promise<uint16_t>>();
  o.on_listening = [listening](uint16_t port) { listening->set_value(port); };
  auto drain_deadline = std::make_shared<std::atomic<bool>>(false);
  o.on_shutdown = [drain_deadline](std::chrono::steady_clock::time_point) { *drain_deadline = true; };
  auto done = std::make_shared<std::promise<int>>();
  auto result = done->get_future();
  std::thread server{[o, held, done] {
    try {
      done->set_value(net::run_http_server(o, [held](net::http_request q) {
        auto ch = std::make_shared<net::response_channel>();
        ch->on_cancel([held] { ++held->cancelled; });
        if (q.target == "/stream")
          ch->send_chunk("data: 0\n\n");  // a stream under way; the others wait for an answer that never comes
        std::lock_guard lock{held->mutex};
        held->channels.push_back(ch);
        return ch;
      }));
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }};
  const uint16_t port = listening->get_future().get();
  std::vector<int> fds;
  for (const char* target : {"/hold", "/hold", "/stream"}) {
    const int fd = connect_local(port);
    REQUIRE(fd >= 0);
    const std::string req = std::string{"GET "} + target + " HTTP/1.1\r\nHost: x\r\n\r\n";
    REQUIRE(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()));
    fds.push_back(fd);
  }
  CHECK(receive_until(fds.back(), "data: 0").find("data: 0") != std::string::npos);
  fds.push_back(connect_local(port));  // and an idle one
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    {
      std::lock_guard lock{held->mutex};
      if (held->channels.size() == 3 || std::chrono::steady_clock::now() > deadline)
        break;
    }
    std::this_thread::yield();
  }
  REQUIRE(held->channels.size() == 3);

  o.stop->request_stop();
  const bool returned = result.wait_for(5s) == std::future_status::ready;
  CHECK_MESSAGE(returned, "run_http_server did not return within 5 s of a stop with a zero shutdown timeout");
  if (!returned)
    o.stop->request_stop();  // a second stop is immediate: fail rather than hang
  server.join();
  if (returned)
    CHECK(result.get() == 0);
  CHECK(drain_deadline->load());
  CHECK(held->cancelled.load() == 3);  // each request left behind was cancelled (its engine request aborted)
  // The delivery thread goes on feeding them: nothing of the server may be reached from here.
  for (const auto& ch : held->channels) {
    ch->send_chunk("data: 1\n\n");
    ch->respond({200, "application/json", "{}", {}});
    ch->close();
  }
  for (int fd : fds)
    if (fd >= 0) {
      CHECK(receive_until(fd, "\r\n0\r\n\r\n").find("data: 1") == std::string::npos);
      ::close(fd);
    }
}

TEST_CASE(
    "run_http_server: at the connection cap the oldest idle connection makes room, and with all busy, a newcomer gets "
    "503") {
  auto held = std::make_shared<std::vector<std::shared_ptr<net::response_channel>>>();
  auto held_mutex = std::make_shared<std::mutex>();
  net::server_options o = test_server_options();
  o.max_connections = 3;
  o.stop = std::make_shared<net::server_stop>();
  auto listening = std::make_shared<std::promise<uint16_t>>();
  o.on_listening = [listening](uint16_t port) { listening->set_value(port); };
  std::thread server{[o, held, held_mutex] {
    net::run_http_server(o, [held, held_mutex](net::http_request q) {
      auto ch = std::make_shared<net::response_channel>();
      if (q.target == "/hold") {
        std::lock_guard lock{*held_mutex};
        held->push_back(ch);  // answered by the test later: a busy connection
      } else {
        ch->respond({200, "application/json", "{}", {}});
      }
      return ch;
    });
  }};
  const uint16_t port = listening->get_future().get();
  const std::string get_json = "GET /json HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string get_hold = "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n";
  auto exchange = [](int fd, const std::string& req) {
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    return receive_until(fd, "{}");
  };
  auto closed_by_server = [](int fd) {
    char c = 0;
    return ::recv(fd, &c, 1, 0) == 0;
  };
  // a and b: keep-alive connections that had a request each and now wait for the next; c: busy.
  const int a = connect_local(port);
  const int b = connect_local(port);
  REQUIRE(exchange(a, get_json).starts_with("HTTP/1.1 200"));
  REQUIRE(exchange(b, get_json).starts_with("HTTP/1.1 200"));
  const int c = connect_local(port);
  ::send(c, get_hold.data(), get_hold.size(), MSG_NOSIGNAL);
  // A fourth: the oldest idle one (a) is closed for it, and it is served.
  const int d = connect_local(port);
  CHECK(exchange(d, get_json).starts_with("HTTP/1.1 200"));
  CHECK(closed_by_server(a));
  // Two more busy ones take the room of b and then d; now every open connection is busy.
  const int e = connect_local(port);
  ::send(e, get_hold.data(), get_hold.size(), MSG_NOSIGNAL);
  CHECK(closed_by_server(b));
  const int f = connect_local(port);
  ::send(f, get_hold.data(), get_hold.size(), MSG_NOSIGNAL);
  CHECK(closed_by_server(d));
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  for (;;) {  // until the server has read the three held requests (so none of them still counts as waiting)
    {
      std::lock_guard lock{*held_mutex};
      if (held->size() == 3 || std::chrono::steady_clock::now() > deadline)
        break;
    }
    std::this_thread::yield();
  }
  // So a newcomer gets 503 with Retry-After, and its connection is closed at once (not left in the backlog).
  const int g = connect_local(port);
  const std::string refused = receive_until(g, "(--max-connections)");
  CHECK(refused.starts_with("HTTP/1.1 503"));
  CHECK(refused.find("Retry-After: 1") != std::string::npos);
  CHECK(refused.find("(--max-connections)") != std::string::npos);
  CHECK(closed_by_server(g));
  // The busy ones were never cut: answered now, each gets its 200.
  {
    std::lock_guard lock{*held_mutex};
    REQUIRE(held->size() == 3);
    for (const auto& ch : *held)
      ch->respond({200, "application/json", "{}", {}});
  }
  for (int fd : {c, e, f})
    CHECK(receive_until(fd, "{}").starts_with("HTTP/1.1 200"));
  for (int fd : {a, b, c, d, e, f, g})
    ::close(fd);
  o.stop->request_stop();
  server.join();
}

TEST_CASE("effective_connection_cap: --max-connections, bounded by what RLIMIT_NOFILE leaves beside open files") {
  CHECK(net::effective_connection_cap(1024, 1 << 20, 40) == 1024);
  CHECK(net::effective_connection_cap(1024, 1024, 40) == 1024 - 40 - 64);
  CHECK(net::effective_connection_cap(10, 1024, 40) == 10);
  CHECK(net::effective_connection_cap(1024, 50, 40) == 1);  // never 0: a server that cannot serve is no use
}
