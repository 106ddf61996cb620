// Hostile clients for the control ports (a cluster head's registry, an engine's worker registry): a seeded
// mutator of raw bytes that speaks as much of the control gate (actors/cluster/control_gate.hpp) as an attacker without
// the key can — random bytes, the gate's magic with garbage, well-formed hellos followed by forged proofs and
// BASP-looking bytes, bit-flipped and truncated handshakes, slow and silent clients. Header-only; used by
// tests/e2e_cluster/cluster_gate_test.cpp.
#pragma once

#include "actors/cluster/control_gate.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace actorllm::test {

/// A connected TCP socket to 127.0.0.1:port, or -1.
inline int connect_loopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
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

/// Reads what the peer sends until it closes or `limit` passes; what arrived.
inline std::string read_until_closed(int fd, std::chrono::milliseconds limit) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0)
      return got;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0)
      return got;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      return got;
    got.append(buf, static_cast<std::size_t>(n));
  }
}

inline void send_quietly(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0)
      return;
    sent += static_cast<std::size_t>(n);
  }
}

/// One attacker run against a control port: `inputs` hostile connections, each of a kind drawn from `gen`.
class control_port_fuzzer {
 public:
  explicit control_port_fuzzer(uint64_t seed) : gen_(seed) {}

  /// Opens one connection to `port` and plays one hostile input on it. Returns false when the port did not even
  /// accept the connection (the process is gone or stopped listening).
  bool attack(uint16_t port) {
    const int fd = connect_loopback(port);
    if (fd < 0)
      return false;
    ++inputs_;
    switch (pick(7)) {
      case 0:  // random bytes, any length
        send_quietly(fd, random_bytes(pick(4097)));
        break;
      case 1:  // the gate's magic, then garbage
        send_quietly(fd, std::string{actors::gate::magic} + random_bytes(pick(2048)));
        break;
      case 2: {  // a well-formed hello from a peer without the key, then a forged proof and BASP-looking bytes
        actors::gate::connector_handshake hs{random_bytes(16)};
        send_quietly(fd, hs.hello());
        const std::string reply = read_exactly(fd, actors::gate::challenge_bytes);
        CHECK_MESSAGE((reply.empty() || reply.rfind(std::string{actors::gate::magic}, 0) == 0),
                      "the gate answered a hello without its magic");
        if (reply.size() == actors::gate::challenge_bytes)
          ++replies_;
        send_quietly(fd, random_bytes(actors::gate::proof_bytes) + basp_like_bytes());
        break;
      }
      case 3: {  // a hello with bits flipped
        actors::gate::connector_handshake hs{"x"};
        std::string hello = hs.hello();
        for (std::size_t k = 0, flips = 1 + pick(4); k < flips; ++k)
          hello[pick(hello.size())] ^= static_cast<char>(1 + pick(255));
        send_quietly(fd, hello + random_bytes(pick(256)));
        break;
      }
      case 4: {  // a truncated hello, then the client goes away
        actors::gate::connector_handshake hs{"x"};
        send_quietly(fd, hs.hello().substr(0, pick(actors::gate::hello_bytes)));
        break;
      }
      case 5:  // slow: a few bytes one at a time
        for (std::size_t k = 0, n = 1 + pick(8); k < n; ++k)
          send_quietly(fd, random_bytes(1));
        break;
      default:  // silent: connects and says nothing (the gate times it out; here the client leaves first)
        break;
    }
    if (pick(2) == 0)
      ::shutdown(fd, SHUT_WR);
    // An abortive close (RST): tens of thousands of connections a run would otherwise leave as many sockets in
    // TIME_WAIT here and run this machine out of ephemeral ports, which is not what is under test.
    const linger abort_on_close{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
    ::close(fd);
    return true;
  }

  std::size_t inputs() const { return inputs_; }
  /// Gate replies received to well-formed hellos: the gate thread kept answering.
  std::size_t replies() const { return replies_; }

 private:
  std::size_t pick(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(gen_() % n); }

  std::string random_bytes(std::size_t n) {
    std::string out(n, '\0');
    for (auto& c : out)
      c = static_cast<char>(gen_());
    return out;
  }

  /// Bytes shaped like a BASP header (a small operation code, flags, a payload length, ids) with random payload:
  /// what crashed CAF's parser when it was reachable.
  std::string basp_like_bytes() {
    std::string out = random_bytes(40);
    out[0] = static_cast<char>(pick(8));
    return out + random_bytes(pick(512));
  }

  static std::string read_exactly(int fd, std::size_t n) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{3};
    char buf[256];
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0)
        continue;
      const ssize_t r = ::recv(fd, buf, std::min(sizeof buf, n - got.size()), 0);
      if (r <= 0)
        break;
      got.append(buf, static_cast<std::size_t>(r));
    }
    return got;
  }

  std::mt19937_64 gen_;
  std::size_t inputs_ = 0;
  std::size_t replies_ = 0;
};

}  // namespace actorllm::test
