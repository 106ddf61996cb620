// The control gate's handshake as plain classes (no sockets), and its blocking client over a socketpair: both sides
// accept each other only with the same key, refuse every malformed or mutated message, and never take a byte
// beyond their own messages (those belong to CAF).
#include "actors/cluster/control_gate.hpp"

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
  std::string connector_reason;
};

exchange_result run_exchange(const std::string& connector_key, const std::string& acceptor_key) {
  gate::connector_handshake c{connector_key};
  gate::acceptor_handshake a{acceptor_key};
  REQUIRE(a.wanted() == gate::hello_bytes);
  REQUIRE(c.hello().size() == gate::hello_bytes);
  const std::string challenge = a.feed(c.hello());
  REQUIRE(challenge.size() == gate::challenge_bytes);
  CHECK(a.replied());
  CHECK(a.state() == gate::outcome::pending);
  CHECK(a.wanted() == gate::proof_bytes);
  REQUIRE(c.wanted() == gate::challenge_bytes);
  const std::string proof = c.feed(challenge);
  REQUIRE(proof.size() == gate::proof_bytes);
  CHECK(c.proved());
  CHECK(c.state() == gate::outcome::pending);
  REQUIRE(c.wanted() == gate::verdict_bytes);
  const std::string verdict = a.feed(proof);
  REQUIRE(verdict.size() == gate::verdict_bytes);
  CHECK(c.feed(verdict).empty());
  CHECK(c.wanted() == 0);
  CHECK(a.wanted() == 0);
  return {c.state(), a.state(), c.reason()};
}

}  // namespace

TEST_CASE("gate: the same key on both sides passes, a different key is refused by the acceptor first") {
  auto same = run_exchange("cluster-token", "cluster-token");
  CHECK(same.connector == gate::outcome::accepted);
  CHECK(same.acceptor == gate::outcome::accepted);

  // The acceptor checks the connector's proof before it proves anything itself, and says so with its refusal.
  auto differ = run_exchange("token-a", "token-b");
  CHECK(differ.acceptor == gate::outcome::refused);
  CHECK(differ.connector == gate::outcome::refused);
  CHECK(differ.connector_reason.find("wrong cluster token") != std::string::npos);
}

TEST_CASE("gate: a stranger learns nothing from the acceptor that depends on the key (no offline guessing)") {
  // Everything an acceptor sends to a peer that has not proved the key: its challenge and, after a wrong proof, its
  // verdict. Both must be the same for every key (the magic, a random nonce, the constant refusal), so a recorded
  // exchange lets no one test a guessed token offline. (Version 1 answered the hello with its own proof: an HMAC
  // under the key over both nonces, enough to test guesses at leisure.)
  for (const std::string key : {"the-real-token-0123456789abcdef0123", "another-token-fedcba9876543210fedcba"}) {
    gate::connector_handshake stranger{"a-guess"};
    gate::acceptor_handshake a{key};
    const std::string challenge = a.feed(stranger.hello());
    REQUIRE(challenge.size() == gate::challenge_bytes);
    CHECK(challenge.substr(0, gate::magic.size()) == gate::magic);
    const std::string proof = stranger.feed(challenge);
    const std::string verdict = a.feed(proof);
    CHECK(verdict == gate::refusal);
    CHECK(a.state() == gate::outcome::refused);
    stranger.feed(verdict);
    CHECK(stranger.state() == gate::outcome::refused);
  }
}

TEST_CASE("gate: an acceptor refuses a proof made with another key, and a replayed proof") {
  gate::connector_handshake honest{"k"};
  gate::acceptor_handshake a{"k"};
  (void)a.feed(honest.hello());
  // A proof computed with the wrong key (what a peer without the token would have to guess).
  const std::string forged = gate::hmac_sha256("not-k", "anything");
  CHECK(a.feed(forged) == gate::refusal);
  CHECK(a.state() == gate::outcome::refused);
  CHECK(a.reason().find("cluster token") != std::string::npos);

  // A proof recorded from one session does not open another: every acceptor picks a fresh nonce.
  gate::acceptor_handshake first{"k"};
  gate::connector_handshake c{"k"};
  const std::string recorded = c.feed(first.feed(c.hello()));
  c.feed(first.feed(recorded));
  REQUIRE(c.state() == gate::outcome::accepted);
  gate::acceptor_handshake second{"k"};
  second.feed(c.hello());
  CHECK(second.feed(recorded) == gate::refusal);
  CHECK(second.state() == gate::outcome::refused);
}

TEST_CASE("gate: a connector refuses a verdict that is neither the acceptor's proof nor the refusal") {
  gate::connector_handshake c{"k"};
  gate::acceptor_handshake a{"k"};
  (void)a.feed(c.hello());
  const std::string challenge = std::string{gate::magic} + std::string(gate::nonce_bytes, 'n');
  gate::connector_handshake fooled{"k"};
  (void)fooled.feed(challenge);
  fooled.feed(gate::hmac_sha256("k", "not the acceptor's proof"));
  CHECK(fooled.state() == gate::outcome::refused);
  CHECK_FALSE(fooled.no_gate());
  CHECK(fooled.reason().find("could not prove") != std::string::npos);
}

TEST_CASE("gate: byte-at-a-time delivery gives the same result and never consumes more than wanted") {
  gate::connector_handshake c{"key"};
  gate::acceptor_handshake a{"key"};
  std::string challenge;
  for (char ch : c.hello()) {
    REQUIRE(a.wanted() > 0);
    challenge += a.feed(std::string_view{&ch, 1});
  }
  REQUIRE(challenge.size() == gate::challenge_bytes);
  std::string proof;
  for (char ch : challenge)
    proof += c.feed(std::string_view{&ch, 1});
  REQUIRE(proof.size() == gate::proof_bytes);
  std::string verdict;
  for (char ch : proof)
    verdict += a.feed(std::string_view{&ch, 1});
  CHECK(a.state() == gate::outcome::accepted);
  CHECK(a.wanted() == 0);
  CHECK_THROWS_AS(a.feed("x"), std::logic_error);
  REQUIRE(verdict.size() == gate::verdict_bytes);
  for (char ch : verdict)
    c.feed(std::string_view{&ch, 1});
  CHECK(c.state() == gate::outcome::accepted);
  CHECK_THROWS_AS(c.feed("x"), std::logic_error);
}

TEST_CASE("gate: a peer that does not speak the gate is told apart from one with another key") {
  gate::acceptor_handshake a{"k"};
  // A TLS ClientHello starts with 0x16 0x03: refused at the magic, nothing sent.
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

  // An acceptor of the first version answered the hello with 80 bytes under "ACTORLLM-GATE/1": not our gate.
  gate::connector_handshake newer{"k"};
  newer.feed("ACTORLLM-GATE/1\n");
  CHECK(newer.state() == gate::outcome::refused);
  CHECK(newer.no_gate());
}

TEST_CASE("gate: mutated and truncated messages are refused, never accepted, never crash [asan]") {
  std::mt19937_64 gen{20261124};
  int accepted_mutants = 0;
  int tried = 0;
  auto mutate = [&gen](std::string msg, int op) {
    if (op == 0) {
      const std::size_t at = gen() % msg.size();
      msg[at] = static_cast<char>(msg[at] ^ static_cast<char>(1 + gen() % 255));
    } else if (op == 1) {
      msg.resize(gen() % msg.size());
    } else {
      for (auto& ch : msg)
        ch = static_cast<char>(gen());
    }
    return msg;
  };
  for (int round = 0; round < 3000; ++round) {
    gate::connector_handshake c{"token"};
    gate::acceptor_handshake a{"token"};
    const std::string hello = c.hello();
    const std::string challenge = a.feed(hello);
    const std::string proof = c.feed(challenge);
    REQUIRE(proof.size() == gate::proof_bytes);
    // Mutate one message: the hello (for a fresh acceptor), the proof, or the verdict (for the connector): flip a
    // byte, truncate, or replace with random bytes.
    const int target = static_cast<int>(gen() % 3);
    const int op = static_cast<int>(gen() % 3);
    ++tried;
    if (target == 0) {
      const std::string verdict = a.feed(mutate(proof, op));
      if (a.state() == gate::outcome::accepted)
        ++accepted_mutants;
      if (op == 1) {
        CHECK(verdict.empty());
        CHECK(a.state() == gate::outcome::pending);  // truncated: still waiting (the gate thread times it out)
      } else {
        CHECK(verdict == gate::refusal);
      }
    } else if (target == 1) {
      gate::acceptor_handshake fresh{"token"};
      const std::string answer = fresh.feed(mutate(hello, op));
      if (op == 1) {
        CHECK(answer.empty());
        CHECK(fresh.state() == gate::outcome::pending);
      } else if (fresh.state() == gate::outcome::pending) {
        // A hello whose nonce changed but whose magic survived is a valid hello: the proof then decides.
        REQUIRE(answer.size() == gate::challenge_bytes);
        CHECK(fresh.feed(proof) == gate::refusal);  // the proof of another session
        CHECK(fresh.state() == gate::outcome::refused);
      }
    } else {
      const std::string verdict = a.feed(proof);
      REQUIRE(a.state() == gate::outcome::accepted);
      c.feed(mutate(verdict, op));
      if (c.state() == gate::outcome::accepted)
        ++accepted_mutants;
      if (op == 1)
        CHECK(c.state() == gate::outcome::pending);
    }
  }
  CHECK(tried == 3000);
  CHECK(accepted_mutants == 0);
}

TEST_CASE("gate: the blocking client over a socket reads only the gate's bytes and reports the peer's failures") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  // The acceptor's side by hand: read the hello, challenge, read the proof, send the verdict and CAF's first bytes.
  std::thread acceptor{[fd = fds[1]] {
    gate::acceptor_handshake a{"shared"};
    char buf[128];
    while (a.state() == gate::outcome::pending) {
      const ssize_t n = ::recv(fd, buf, a.wanted(), 0);
      if (n <= 0)
        break;
      std::string out = a.feed(std::string_view{buf, static_cast<std::size_t>(n)});
      if (a.state() == gate::outcome::accepted)
        out += "CAF-BYTES";  // what CAF would send right after the verdict: the client must leave it on the socket
      if (!out.empty())
        (void)::send(fd, out.data(), out.size(), 0);
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
    while (a.state() == gate::outcome::pending) {
      const ssize_t n = ::recv(fd, buf, a.wanted(), 0);
      if (n <= 0)
        break;
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
