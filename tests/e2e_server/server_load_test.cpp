// `actorllm serve` under load: many streaming clients at once (poll()-driven sockets), and many that hang up
// mid-stream, after which every request and KV block must be free again.
#include "server_harness.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace actorllm::e2e;
using namespace std::chrono_literals;

namespace {

struct client {
  int fd = -1;
  std::string out;  // request bytes not sent yet
  std::string in;   // everything received
  int data_events = 0;
  bool done = false;
};

int count_data_events(const std::string& raw) {
  int n = 0;
  for (std::size_t at = raw.find("data: "); at != std::string::npos; at = raw.find("data: ", at + 1))
    ++n;
  return n;
}

/// Opens `n` connections sending `body` to /v1/completions and drives them with poll() until every one is done:
/// closed by the server, or (`hang_up_after` > 0) once it got that many SSE events, when the client resets it.
/// Returns the clients; `last_hang_up` gets the time of the last reset.
std::vector<client> drive(uint16_t port, int n, const std::string& body, int hang_up_after,
                          steady::time_point& last_hang_up, std::chrono::seconds limit) {
  std::vector<client> clients(static_cast<std::size_t>(n));
  const std::string req = request_text("POST", "/v1/completions", body, {});
  for (client& c : clients) {
    c.fd = connect_to(port);
    ::fcntl(c.fd, F_SETFL, ::fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    c.out = req;
  }
  const auto deadline = steady::now() + limit;
  int open = n;
  char buf[65536];
  while (open > 0) {
    REQUIRE_MESSAGE(steady::now() < deadline, open << " of " << n << " clients not done in time");
    std::vector<pollfd> fds;
    std::vector<client*> who;
    for (client& c : clients)
      if (!c.done) {
        fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
        who.push_back(&c);
      }
    REQUIRE(::poll(fds.data(), fds.size(), 100) >= 0);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      client& c = *who[i];
      if ((fds[i].revents & POLLOUT) && !c.out.empty()) {
        ssize_t k = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (k > 0)
          c.out.erase(0, static_cast<std::size_t>(k));
      }
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t k = ::recv(c.fd, buf, sizeof buf, 0);
        if (k > 0) {
          c.in.append(buf, static_cast<std::size_t>(k));
          c.data_events = count_data_events(c.in);
          if (hang_up_after > 0 && c.data_events >= hang_up_after) {
            linger lg{1, 0};  // reset, as a killed client does
            ::setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            ::close(c.fd);
            c.done = true;
            --open;
            last_hang_up = steady::now();
          }
        } else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
          ::close(c.fd);
          c.done = true;
          --open;
        }
      }
    }
  }
  return clients;
}

}  // namespace

TEST_CASE("50 streaming clients that hang up midway leave no running request and no used KV block within 1 s") {
  server s;
  steady::time_point last_hang_up{};
  const auto started = steady::now();
  auto clients =
      drive(s.port(), 50, R"({"prompt":"Once upon a time","max_tokens":400,"ignore_eos":true,"stream":true})", 3,
            last_hang_up, 15s);
  for (const client& c : clients)
    CHECK_MESSAGE(c.data_events >= 3, c.in);  // each hung up itself, mid-stream
  const std::string running = R"(actorllm:num_requests_running{model_name="stories"})";
  const std::string waiting = R"(actorllm:num_requests_waiting{model_name="stories"})";
  const std::string kv = R"(actorllm:kv_cache_usage_perc{model_name="stories"})";
  const std::string aborted = R"(actorllm:request_success_total{model_name="stories",finished_reason="abort"})";
  std::string m;
  for (;;) {
    m = http(s.port(), "GET", "/metrics").body;
    if (metric(m, running) == 0.0 && metric(m, waiting) == 0.0 && metric(m, kv) == 0.0 && metric(m, aborted) == 50.0)
      break;
    REQUIRE_MESSAGE(steady::now() < last_hang_up + 1s, "not all free 1 s after the last hang-up:\n" << m);
    std::this_thread::sleep_for(10ms);
  }
  MESSAGE("50 hang-ups: " << std::chrono::duration<double>(steady::now() - started).count() << " s in all, free "
                          << std::chrono::duration<double>(steady::now() - last_hang_up).count() * 1000
                          << " ms after the last");
  CHECK(http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4})").status == 200);
}

TEST_CASE("200 concurrent streaming requests all complete with [DONE] and no error") {
  server s;
  steady::time_point unused{};
  const auto started = steady::now();
  auto clients = drive(s.port(), 200, R"({"prompt":"Once upon a time","max_tokens":32,"stream":true})", 0, unused, 20s);
  const double seconds = std::chrono::duration<double>(steady::now() - started).count();
  int complete = 0;
  for (const client& c : clients) {
    auto r = parse_reply(c.in);
    REQUIRE_MESSAGE(r.status == 200, c.in);
    auto payloads = sse_payloads(r.body);
    bool error = false;
    for (const auto& p : payloads)
      error = error || p.find(R"("error")") != std::string::npos;
    CHECK_MESSAGE(!error, r.body);
    complete += payloads.back() == "[DONE]" && !error;
  }
  CHECK(complete == 200);
  MESSAGE("200 concurrent streams: " << seconds << " s");
  auto m = http(s.port(), "GET", "/metrics").body;
  CHECK(metric(m, R"(actorllm:request_success_total{model_name="stories",finished_reason="length"})").value_or(0) +
            metric(m, R"(actorllm:request_success_total{model_name="stories",finished_reason="stop"})").value_or(0) ==
        200);
}
