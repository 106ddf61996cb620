// The control gate's handshake as plain classes (no sockets), and its blocking client over a socketpair: both sides
// accept each other only with the same key, refuse every malformed or mutated message, and never take a byte
// beyond their own messages (those belong to CAF).
#include "actors/control_gate.hpp"

#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

using namespace actorllm::actors;
using namespace std::chrono_literals;

namespace {

/// Runs a whole exchange between a connector with `connector_key` and an acceptor with `acceptor_key`.
struct exchange_result {
  gate::outcome connector;
  gate::outcome acceptor;
};

exchange_result run_exchange(const std::string& connector_key, const std::string& acceptor_key) {
  gate::connector_handshake c{connector_key};
  gate::acceptor_handshake a{acceptor_key};
  REQUIRE(a.wanted() == gate::hello_bytes);
  REQUIRE(c.hello().size() == gate::hello_bytes);
  const std::string reply = a.feed(c.hello());
  REQUIRE(reply.size() == gate::reply_bytes);
  CHECK(a.replied());
  CHECK(a.state() == gate::outcome::pending);
  CHECK(a.wanted() == gate::proof_bytes);
  const std::string proof = c.feed(reply);
  if (c.state() == gate::outcome::accepted) {
    REQUIRE(proof.size() == gate::proof_bytes);
    a.feed(proof);
  } else {
    CHECK(proof.empty());
  }
  CHECK(c.wanted() == 0);
  return {c.state(), a.state()};
}

}  // namespace

TEST_CASE("gate: the same key on both sides passes, a different key is refused by the connector first") {
  auto same = run_exchange("cluster-token", "cluster-token");
  CHECK(same.connector == gate::outcome::accepted);
  CHECK(same.acceptor == gate::outcome::accepted);

  auto empty = run_exchange("", "");
  CHECK(empty.connector == gate::outcome::accepted);
  CHECK(empty.acceptor == gate::outcome::accepted);

  // The connector checks the acceptor's proof first and gives none of its own when it is wrong.
  auto differ = run_exchange("token-a", "token-b");
  CHECK(differ.connector == gate::outcome::refused);
  CHECK(differ.acceptor == gate::outcome::pending);
}

TEST_CASE("gate: an acceptor refuses a proof made with another key, and a replayed proof") {
  gate::connector_handshake honest{"k"};
  gate::acceptor_handshake a{"k"};
  const std::string reply = a.feed(honest.hello());
  // A proof computed with the wrong key (what a peer without the token would have to guess).
  const std::string forged = gate::hmac_sha256("not-k", "anything");
  a.feed(forged);
  CHECK(a.state() == gate::outcome::refused);
  CHECK(a.reason().find("cluster token") != std::string::npos);

  // A proof recorded from one session does not open another: every acceptor picks a fresh nonce.
  gate::acceptor_handshake first{"k"};
  gate::connector_handshake c{"k"};
  const std::string recorded = c.feed(first.feed(c.hello()));
  REQUIRE(c.state() == gate::outcome::accepted);
  gate::acceptor_handshake second{"k"};
  second.feed(c.hello());
  second.feed(recorded);
  CHECK(second.state() == gate::outcome::refused);
}

TEST_CASE("gate: byte-at-a-time delivery gives the same result and never consumes more than wanted") {
  gate::connector_handshake c{"key"};
  gate::acceptor_handshake a{"key"};
  std::string reply;
  for (char ch : c.hello()) {
    REQUIRE(a.wanted() > 0);
    reply += a.feed(std::string_view{&ch, 1});
  }
  REQUIRE(reply.size() == gate::reply_bytes);
  std::string proof;
  for (char ch : reply)
    proof += c.feed(std::string_view{&ch, 1});
  REQUIRE(c.state() == gate::outcome::accepted);
  for (char ch : proof)
    a.feed(std::string_view{&ch, 1});
  CHECK(a.state() == gate::outcome::accepted);
  CHECK(a.wanted() == 0);
  CHECK_THROWS_AS(a.feed("x"), std::logic_error);
}

TEST_CASE("gate: a peer that does not speak the gate is told apart from one with another key") {
  gate::acceptor_handshake a{"k"};
  // A TLS ClientHello starts with 0x16 0x03: refused at the magic, no reply sent.
  std::string tls_hello(gate::hello_bytes, '\0');
  tls_hello[0] = '\x16';
  tls_hello[1] = '\x03';
  CHECK(a.feed(tls_hello).empty());
  CHECK(a.state() == gate::outcome::refused);
  CHECK(a.reason().find("TLS") != std::string::npos);

  gate::connector_handshake c{"k"};
  c.feed("HTTP/1.1 400 Bad");  // refused as soon as the first bytes disagree with the magic
  CHECK(c.state() == gate::outcome::refused);
  CHECK(c.no_gate());
  CHECK(c.wanted() == 0);
}

TEST_CASE("gate: mutated and truncated messages are refused, never accepted, never crash [asan]") {
  std::mt19937_64 gen{20261124};
  int accepted_mutants = 0;
  int tried = 0;
  for (int round = 0; round < 3000; ++round) {
    gate::connector_handshake c{"token"};
    gate::acceptor_handshake a{"token"};
    std::string hello = c.hello();
    std::string reply = a.feed(hello);
    std::string proof = c.feed(reply);
    REQUIRE(c.state() == gate::outcome::accepted);
    // Mutate the proof (or the hello, for a fresh acceptor): flip bytes, truncate, or replace with random bytes.
    const int target = static_cast<int>(gen() % 2);
    std::string msg = target == 0 ? proof : hello;
    const int op = static_cast<int>(gen() % 3);
    if (op == 0) {
      const std::size_t at = gen() % msg.size();
      msg[at] = static_cast<char>(msg[at] ^ static_cast<char>(1 + gen() % 255));
    } else if (op == 1) {
      msg.resize(gen() % msg.size());
    } else {
      for (auto& ch : msg)
        ch = static_cast<char>(gen());
    }
    ++tried;
    if (target == 0) {
      a.feed(msg);
      if (a.state() == gate::outcome::accepted)
        ++accepted_mutants;
      if (op == 1)
        CHECK(a.state() == gate::outcome::pending);  // truncated: still waiting (the gate thread times it out)
    } else {
      gate::acceptor_handshake fresh{"token"};
      const std::string answer = fresh.feed(msg);
      if (op == 1) {
        CHECK(answer.empty());
        CHECK(fresh.state() == gate::outcome::pending);
      } else if (fresh.state() == gate::outcome::pending) {
        // A hello whose nonce changed but whose magic survived is a valid hello: the proof then decides.
        REQUIRE(answer.size() == gate::reply_bytes);
        fresh.feed(proof);  // the proof of another session
        CHECK(fresh.state() == gate::outcome::refused);
      }
    }
  }
  CHECK(tried == 3000);
  CHECK(accepted_mutants == 0);
}

TEST_CASE("gate: the blocking client over a socket reads only the gate's bytes and reports the peer's failures") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  // The acceptor's side by hand: read the hello, answer, read the proof, then send CAF's first bytes.
  std::thread acceptor{[fd = fds[1]] {
    gate::acceptor_handshake a{"shared"};
    char buf[128];
    while (a.state() == gate::outcome::pending) {
      const ssize_t n = ::recv(fd, buf, a.wanted(), 0);
      if (n <= 0)
        break;
      std::string out = a.feed(std::string_view{buf, static_cast<std::size_t>(n)});
      if (!out.empty()) {
        out += "CAF-BYTES";  // what CAF would send right after: the client must leave it on the socket
        (void)::send(fd, out.data(), out.size(), 0);
      }
    }
    CHECK(a.state() == gate::outcome::accepted);
  }};
  CHECK_FALSE(gate::connect_through_gate(fds[0], "shared", 5s).has_value());
  acceptor.join();
  char rest[16] = {};
  REQUIRE(::recv(fds[0], rest, 9, 0) == 9);
  CHECK(std::string{rest} == "CAF-BYTES");
  ::close(fds[0]);
  ::close(fds[1]);

  // A peer that never answers: a timeout that says so (no_gate: it may be a TLS endpoint).
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  auto silent = gate::connect_through_gate(fds[0], "shared", 200ms);
  REQUIRE(silent.has_value());
  CHECK(silent->no_gate);
  CHECK(silent->message.find("within 200 ms") != std::string::npos);
  ::close(fds[0]);
  ::close(fds[1]);

  // A peer with another key.
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  std::thread other{[fd = fds[1]] {
    gate::acceptor_handshake a{"other"};
    char buf[128];
    const ssize_t n = ::recv(fd, buf, a.wanted(), MSG_WAITALL);
    if (n > 0) {
      const std::string out = a.feed(std::string_view{buf, static_cast<std::size_t>(n)});
      (void)::send(fd, out.data(), out.size(), 0);
    }
  }};
  auto wrong = gate::connect_through_gate(fds[0], "shared", 5s);
  other.join();
  REQUIRE(wrong.has_value());
  CHECK_FALSE(wrong->no_gate);
  CHECK(wrong->message.find("cluster token") != std::string::npos);
  ::close(fds[0]);
  ::close(fds[1]);
}
