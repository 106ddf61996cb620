// Raw-socket play of a fuzz case: one poll loop that writes the case's pieces and reads whatever the server sends
// meanwhile (a server may answer, and close, before a request ends), then ends the connection as the case says.
#include "fuzz/raw_client.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>
#include <string_view>

namespace actorllm::fuzz {

namespace {

using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// Closes the socket on every path out.
class socket_fd {
 public:
  socket_fd() : fd_{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)} {}
  ~socket_fd() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  int get() const { return fd_; }
  /// Closes now; with `reset`, with an RST (SO_LINGER 0) instead of a FIN.
  void close(bool reset) {
    if (fd_ < 0)
      return;
    if (reset) {
      linger lg{1, 0};
      ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

/// Connects (blocking, on loopback that is immediate), then makes the socket non-blocking; "" or why it failed.
std::string connect_to(const socket_fd& s, uint16_t port) {
  if (s.get() < 0)
    return fmt::format("socket: {}", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return fmt::format("connect: {}", std::strerror(errno));
  int one = 1;
  ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(s.get(), F_SETFL, ::fcntl(s.get(), F_GETFL) | O_NONBLOCK);
  return {};
}

/// The connection's read side: what arrived and whether it ended.
struct reader {
  std::string raw;
  bool closed = false;

  /// Reads what is there without blocking; true when anything happened (bytes or the end).
  bool drain(int fd) {
    bool progress = false;
    char buf[65536];
    while (!closed) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        raw.append(buf, static_cast<std::size_t>(n));
        progress = true;
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        closed = true;  // an orderly close or a reset: either way the server is done with us
        progress = true;
      } else {
        break;
      }
    }
    return progress;
  }
};

/// Waits for `events` on `fd` for at most `limit` (microsecond resolution, unlike poll's milliseconds).
short wait_for(int fd, short events, std::chrono::microseconds limit) {
  pollfd p{fd, events, 0};
  timespec ts{static_cast<time_t>(limit.count() / 1000000), static_cast<long>(limit.count() % 1000000) * 1000};
  if (::ppoll(&p, 1, &ts, nullptr) <= 0)
    return 0;
  return p.revents;
}

/// Writes `data`, reading meanwhile; false when the server stopped taking bytes (closed, or no progress for `bound`).
bool send_piece(int fd, const std::string& data, reader& in, std::chrono::milliseconds bound) {
  std::size_t sent = 0;
  auto last_progress = steady::now();
  while (sent < data.size()) {
    const auto left = bound - std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - last_progress);
    if (left <= 0ms)
      return false;  // the server neither reads nor closes: the read phase judges whether that is a hang
    const short ev = wait_for(fd, POLLIN | POLLOUT, left);
    if (ev & (POLLIN | POLLHUP | POLLERR)) {
      if (in.drain(fd))
        last_progress = steady::now();
      if (in.closed)
        return false;
    }
    if (ev & POLLOUT) {
      const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        last_progress = steady::now();
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return false;  // EPIPE or ECONNRESET: the server closed (it may have answered first)
      }
    }
  }
  return true;
}

bool iequals_prefix(std::string_view line, std::string_view name) {
  if (line.size() < name.size())
    return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i])
      return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string out{s};
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::size_t parse_responses(const std::string& raw, bool closed, std::vector<int>& statuses, bool& last_closes,
                            std::string& problem) {
  std::size_t pos = 0;
  while (pos < raw.size()) {
    const std::size_t head_end = raw.find("\r\n\r\n", pos);
    if (head_end == std::string::npos)
      return pos;
    const std::string_view head{raw.data() + pos, head_end - pos};
    if (head.substr(0, 9) != "HTTP/1.1 " || head.size() < 12 || !std::isdigit(static_cast<unsigned char>(head[9])) ||
        !std::isdigit(static_cast<unsigned char>(head[10])) || !std::isdigit(static_cast<unsigned char>(head[11]))) {
      problem = fmt::format("malformed status line at byte {}: \"{}\"", pos, escape_bytes(std::string{head}, 200));
      return pos;
    }
    const int status = std::stoi(std::string{head.substr(9, 3)});
    std::optional<std::size_t> length;
    bool chunked = false;
    bool closes = false;
    std::size_t at = head.find("\r\n");
    while (at != std::string_view::npos) {
      const std::size_t next = head.find("\r\n", at + 2);
      const std::string_view line = head.substr(at + 2, next == std::string_view::npos ? head.npos : next - at - 2);
      const std::size_t colon = line.find(':');
      if (colon == std::string_view::npos || colon == 0 || line.find('\n') != std::string_view::npos ||
          line.find('\r') != std::string_view::npos) {
        problem = fmt::format("malformed response header \"{}\"", escape_bytes(std::string{line}, 200));
        return pos;
      }
      std::string value{line.substr(colon + 1)};
      value.erase(0, value.find_first_not_of(' '));
      if (iequals_prefix(line, "content-length:")) {
        if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos || value.size() > 15) {
          problem = fmt::format("bad Content-Length \"{}\"", escape_bytes(value, 100));
          return pos;
        }
        length = std::stoull(value);
      } else if (iequals_prefix(line, "transfer-encoding:"))
        chunked = lower(value) == "chunked";
      else if (iequals_prefix(line, "connection:"))
        closes = lower(value) == "close";
      at = next;
    }
    std::size_t body = head_end + 4;
    if (chunked) {
      for (;;) {
        const std::size_t eol = raw.find("\r\n", body);
        if (eol == std::string::npos)
          return pos;
        std::size_t size = 0;
        try {
          size = std::stoull(raw.substr(body, eol - body), nullptr, 16);
        } catch (const std::exception&) {
          problem = fmt::format("bad chunk size line \"{}\"", escape_bytes(raw.substr(body, eol - body), 200));
          return pos;
        }
        body = eol + 2 + size;
        if (body + 2 > raw.size())
          return pos;
        if (raw.compare(body, 2, "\r\n") != 0) {
          problem = "chunk data not followed by CRLF";
          return pos;
        }
        body += 2;
        if (size == 0)
          break;
      }
    } else if (length) {
      if (body + *length > raw.size())
        return pos;
      body += *length;
    } else if (status >= 200 && status != 204 && status != 304) {
      if (!closed)
        return pos;  // framed by the end of the connection
      body = raw.size();
    }
    statuses.push_back(status);
    last_closes = closes;
    pos = body;
  }
  return pos;
}

case_outcome run_case(uint16_t port, const fuzz_case& c, std::chrono::milliseconds hang_bound,
                      const std::vector<int>& allowed_statuses) {
  case_outcome out;
  socket_fd s;
  if (auto err = connect_to(s, port); !err.empty()) {
    out.problem = "cannot connect: " + err;  // the server stopped listening: it died or its accept loop did
    return out;
  }
  reader in;
  for (std::size_t i = 0; i < c.pieces.size(); ++i) {
    if (!send_piece(s.get(), c.pieces[i], in, hang_bound))
      break;
    if (c.slow && i + 1 < c.pieces.size()) {
      // A trickling client: the pause spreads the bytes over many reads on the server's side (it is the traffic's
      // shape, not a synchronisation); the wait also reads an early answer.
      if (wait_for(s.get(), POLLIN, 50us) != 0 && in.drain(s.get()) && in.closed)
        break;
    }
  }
  switch (c.ending) {
    case client_ending::reset:
      s.close(true);
      return out;
    case client_ending::close_unread:
      s.close(false);
      return out;
    case client_ending::half_close:
      ::shutdown(s.get(), SHUT_WR);
      break;
    case client_ending::hold_open:
      break;
  }
  const auto deadline = steady::now() + hang_bound;
  while (!in.closed) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - steady::now());
    if (left <= 0us)
      break;
    if (wait_for(s.get(), POLLIN, left) == 0 || !in.drain(s.get()) || in.closed)
      continue;
    if (c.ending == client_ending::hold_open && c.requests > 0) {
      // Every request the grammar made is answered and the connection is kept alive: a client would send its next
      // request or leave now, so it leaves (a mutated case may hold fewer requests: it waits for the server).
      std::vector<int> seen;
      bool closes = false;
      std::string ignored;
      if (parse_responses(in.raw, false, seen, closes, ignored) == in.raw.size() &&
          seen.size() >= static_cast<std::size_t>(c.requests) && !closes)
        break;
    }
  }
  out.closed = in.closed;
  out.received = in.raw.size();
  bool last_closes = false;
  const std::size_t complete = parse_responses(in.raw, in.closed, out.statuses, last_closes, out.problem);
  if (!out.problem.empty())
    return out;
  for (int st : out.statuses)
    if (!allowed_statuses.empty() &&
        std::find(allowed_statuses.begin(), allowed_statuses.end(), st) == allowed_statuses.end()) {
      out.problem = fmt::format("unexpected status {}", st);
      return out;
    }
  if (complete < in.raw.size()) {
    out.problem = fmt::format("{} after an incomplete response: \"{}\"", in.closed ? "closed" : "hang",
                              escape_bytes(in.raw.substr(complete), 300));
    return out;
  }
  // Open at the deadline is fine only for a client that holds its side open, on a keep-alive connection resting
  // after complete answers (a server's idle timeout may be longer than the bound). Open with no answer at all is a
  // hang, and so is a connection kept after the client half-closed: no request can follow.
  if (!in.closed && (out.statuses.empty() || last_closes))
    out.problem = fmt::format("hang: the connection was neither answered nor closed within {} ms of the last byte sent",
                              hang_bound.count());
  else if (!in.closed && c.ending == client_ending::half_close)
    out.problem = fmt::format("the connection stayed open {} ms after the client half-closed and was answered",
                              hang_bound.count());
  return out;
}

int probe(uint16_t port, const std::string& target, std::chrono::milliseconds bound, std::string& why) {
  fuzz_case c;
  c.pieces = {"GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"};
  c.ending = client_ending::hold_open;
  case_outcome r = run_case(port, c, bound, {});
  if (!r.problem.empty() || r.statuses.size() != 1) {
    why = r.problem.empty() ? fmt::format("{} responses", r.statuses.size()) : r.problem;
    return 0;
  }
  return r.statuses.front();
}

}  // namespace actorllm::fuzz
