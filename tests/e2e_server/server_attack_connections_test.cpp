// Issue 30, item 6: more idle connections than `ulimit -n` allows. Before the fix the server accepted until accept()
// failed with EMFILE, then retried at once for ever: one core at 100%, and /health and every completion waited in
// the backlog until they timed out. Now the connection cap (--max-connections, bounded by RLIMIT_NOFILE) closes the
// oldest idle connection for a newcomer, and an accept that fails for want of descriptors frees one the same way or
// backs off 100 ms. Each test floods the real `actorllm serve` and asserts: the process stays up, uses little CPU,
// answers /health within 1 s and a completion within 2 s of its normal latency, holds no more descriptors than its
// limit, keeps its memory within a bound, and the excess connections are closed.
#include "server_harness.hpp"

#include <doctest/doctest.h>

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

using namespace actorllm::e2e;

namespace {

/// User + system CPU time of `pid` so far, in seconds (/proc/PID/stat fields 14 and 15).
double cpu_seconds(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream in{stat.substr(stat.rfind(')') + 2)};  // after the command name, which may hold spaces
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14)
      utime = std::stoull(field);
    if (i == 15)
      stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// A field of /proc/PID/status in kB (VmRSS, VmHWM).
long status_kb(pid_t pid, const std::string& key) {
  std::istringstream in{read_file("/proc/" + std::to_string(pid) + "/status")};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0)
      return std::stol(line.substr(key.size() + 1));
  return -1;
}

std::size_t open_fds(pid_t pid) {
  std::size_t n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it{"/proc/" + std::to_string(pid) + "/fd", ec}, end; !ec && it != end;
       it.increment(ec))
    ++n;
  return n;
}

/// GET /health on a new connection: its status, or 0 when no complete answer came within `bound` (a connection left
/// in the backlog).
int health_within(uint16_t port, std::chrono::milliseconds bound) {
  const int fd = connect_to(port);
  send_all(fd, request_text("GET", "/health", "", {}));
  const auto deadline = steady::now() + bound;
  std::string raw;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0)
      break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    raw.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (raw.size() < 12 || raw.rfind("HTTP/1.1 ", 0) != 0)
    return 0;
  return std::stoi(raw.substr(9, 3));
}

/// Seconds one greedy completion of 16 tokens takes, checked to succeed.
double completion_seconds(uint16_t port) {
  const auto t0 = steady::now();
  const auto r =
      http(port, "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":16,"temperature":0})");
  CHECK_MESSAGE(r.status == 200, r.body);
  return std::chrono::duration<double>(steady::now() - t0).count();
}

/// How many of `fds` the server has closed (end of stream, or reset): the ones it dropped to make room, and those
/// it answered 503.
std::size_t closed_by_server(const std::vector<int>& fds) {
  std::size_t n = 0;
  for (int fd : fds) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) {
      char buf[1024];
      const ssize_t got = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno == ECONNRESET) || (got >= 12 && std::string_view{buf, 12} == "HTTP/1.1 503"))
        ++n;
    }
  }
  return n;
}

/// Holds the flood, measures the server over `window`, and checks what the issue's acceptance asks.
void check_under_flood(server& s, const std::vector<int>& flood, std::size_t fd_limit, double normal_seconds,
                       long rss_before_kb) {
  const pid_t pid = s.pid();
  // The server's CPU while it holds the flood and nothing else happens: a measurement window, not a synchronization.
  const double cpu0 = cpu_seconds(pid);
  const auto w0 = steady::now();
  std::this_thread::sleep_for(2s);
  const double wall = std::chrono::duration<double>(steady::now() - w0).count();
  const double cpu = (cpu_seconds(pid) - cpu0) / wall;
  // Then /health within 1 s and a completion within 2 s of its normal latency, several times over.
  const auto t0 = steady::now();
  int health_ok = 0;
  double worst_completion = 0;
  while (steady::now() - t0 < 3s) {
    const auto h0 = steady::now();
    const int h = health_within(s.port(), 1s);
    CHECK_MESSAGE(h == 200, "/health gave " << h << " within 1 s under the flood");
    CHECK(steady::now() - h0 < 1s);
    health_ok += h == 200;
    worst_completion = std::max(worst_completion, completion_seconds(s.port()));
  }
  const long rss = status_kb(pid, "VmRSS");
  const long hwm = status_kb(pid, "VmHWM");
  const std::size_t fds = open_fds(pid);
  const std::size_t closed = closed_by_server(flood);
  MESSAGE("flood of " << flood.size() << " idle connections at RLIMIT_NOFILE " << fd_limit << ": server CPU "
                      << cpu * 100 << "% of a core over " << wall << " s, " << health_ok << " /health 200s, completion "
                      << worst_completion << " s at worst (normal " << normal_seconds << " s), VmRSS " << rss / 1024
                      << " MiB (before " << rss_before_kb / 1024 << "), VmHWM " << hwm / 1024 << " MiB, " << fds
                      << " fds open, " << closed << " flood connections closed");
  CHECK(cpu < 0.2);  // a spinning accept loop is a whole core (1.0)
  CHECK(worst_completion < normal_seconds + 2.0);
  CHECK(fds <= fd_limit);
  CHECK(rss < rss_before_kb + 64 * 1024);    // the flood's sessions hold a few KiB each, not MiBs
  CHECK(closed >= flood.size() - fd_limit);  // at least what the descriptors cannot hold went away
  check_openai_error(http(s.port(), "GET", "/v1/models/none"), 404);  // and the server still routes
}

}  // namespace

TEST_CASE("attack: 1,100 idle connections at ulimit -n 1024: no spinning, /health and completions still answer") {
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  // The server gets 1024 descriptors (less where the hard limit leaves this process too few for the flood).
  const rlim_t limit = saved.rlim_max == RLIM_INFINITY || saved.rlim_max >= 4096 ? 1024 : saved.rlim_max / 2;
  const std::size_t n_flood = limit + 76;  // 1,100 at 1024
  rlimit lowered{limit, saved.rlim_max};
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  std::optional<server> started;
  try {
    started.emplace();  // the child inherits the lowered limit
  } catch (...) {
    ::setrlimit(RLIMIT_NOFILE, &saved);
    throw;
  }
  rlimit raised{saved.rlim_max == RLIM_INFINITY ? rlim_t{1 << 16} : saved.rlim_max, saved.rlim_max};
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &raised) == 0);  // this process holds the flood
  server& s = *started;
  CHECK(s.log().find("At most ") != std::string::npos);  // the startup log names the cap in force
  const double normal = completion_seconds(s.port());
  const long rss_before = status_kb(s.pid(), "VmRSS");
  std::vector<int> flood;
  for (std::size_t i = 0; i < n_flood; ++i)
    flood.push_back(connect_to(s.port()));  // connected, nothing sent: idle
  check_under_flood(s, flood, limit, normal, rss_before);
  for (int fd : flood)
    ::close(fd);
  ::setrlimit(RLIMIT_NOFILE, &saved);
}

TEST_CASE("attack: a descriptor limit lowered under a running server: accept backs off or frees an idle one, no spin") {
  // The cap was taken from a larger limit at start, so accept() itself fails with EMFILE: the path that spun.
  server s;
  const rlim_t limit = 256;
  rlimit lowered{limit, limit};
  REQUIRE(::prlimit(s.pid(), RLIMIT_NOFILE, &lowered, nullptr) == 0);
  const double normal = completion_seconds(s.port());
  const long rss_before = status_kb(s.pid(), "VmRSS");
  std::vector<int> flood;
  for (std::size_t i = 0; i < limit + 144; ++i)  // 400: more than the server can hold
    flood.push_back(connect_to(s.port()));
  check_under_flood(s, flood, limit, normal, rss_before);
  for (int fd : flood)
    ::close(fd);
}
