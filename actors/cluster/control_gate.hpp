// The control plane's gate: a mutual challenge-response over the cluster's shared key that every plaintext
// connection between actorllm processes completes before CAF sees a single byte of it (DESIGN.md §5). CAF 0.17's
// BASP parser is not hardened (a crafted packet crashes the process that reads it), so a peer that cannot prove it
// holds the key must never reach it. Plain classes fed bytes, no sockets: the acceptor side runs in the gate thread
// of gated_multiplexer.hpp, the connector side blocks in connect_through_gate.
//
// The exchange (all sizes fixed, so each side reads exactly what belongs to the gate and leaves the rest to CAF):
//   connector -> acceptor  magic (16) + connector nonce (32)                                 hello
//   acceptor -> connector  magic (16) + acceptor nonce (32)                                  challenge
//   connector -> acceptor  HMAC-SHA256(key, "connector" | a-nonce | c-nonce)                 proof
//   acceptor -> connector  HMAC-SHA256(key, "acceptor" | c-nonce | a-nonce), or the refusal  verdict
// Each side proves the key over a nonce the other chose; the labels keep a proof from being reflected back. The
// acceptor proves nothing before the connector has: a stranger who connects to a head learns no MAC under the key, so
// it cannot test guesses of the token offline; it can only try one guess per connection, each logged and refused.
// (A connector does reveal its proof to whatever it connects to, so a fake head could test guesses offline: that is
// why tokens must be long and random, check_cluster_token.)
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace actorllm::actors::gate {

inline constexpr std::string_view magic = "ACTORLLM-GATE/2\n";
inline constexpr std::size_t nonce_bytes = 32;
inline constexpr std::size_t mac_bytes = 32;
/// What the connector sends first.
inline constexpr std::size_t hello_bytes = 16 + nonce_bytes;
/// The acceptor's answer to the hello: its magic and nonce, no proof yet.
inline constexpr std::size_t challenge_bytes = 16 + nonce_bytes;
/// The connector's proof.
inline constexpr std::size_t proof_bytes = mac_bytes;
/// The acceptor's last message: its own proof when the connector's was right, else `refusal`.
inline constexpr std::size_t verdict_bytes = mac_bytes;
/// The largest single message of the exchange (a buffer of this size reads any of them).
inline constexpr std::size_t max_message_bytes = hello_bytes;
/// The verdict of an acceptor that refused the connector's proof (a constant: it tells nothing of the key).
inline constexpr std::string_view refusal = "ACTORLLM-GATE/2 REFUSED A PROOF\n";
static_assert(refusal.size() == verdict_bytes);

/// Where a handshake stands.
enum class outcome { pending, accepted, refused };

/// The accepting side: fed what the connector sends, it says what to answer and whether the peer proved the key.
class acceptor_handshake {
 public:
  explicit acceptor_handshake(std::string key);

  /// How many more bytes to read before the next step; 0 once decided. Never read more than this: the bytes after
  /// the connector's proof are CAF's.
  std::size_t wanted() const;

  /// Consumes `bytes` (at most wanted()). Returns what to send now: the challenge once the hello is complete, the
  /// verdict once the proof is (our proof when it was right, else `refusal`: send it before closing), else nothing.
  /// A malformed hello refuses the peer with nothing to send (see reason()).
  std::string feed(std::string_view bytes);

  outcome state() const { return state_; }
  /// The hello was good and the challenge is out: the peer's proof is what remains.
  bool replied() const { return !peer_nonce_.empty(); }
  /// Why the peer was refused (empty otherwise).
  const std::string& reason() const { return reason_; }

 private:
  std::string key_;
  std::string received_;
  std::string own_nonce_;
  std::string peer_nonce_;
  outcome state_ = outcome::pending;
  std::string reason_;
};

/// The connecting side: hello() first; fed the acceptor's challenge, it gives its proof; fed the verdict, it checks
/// the acceptor's proof.
class connector_handshake {
 public:
  explicit connector_handshake(std::string key);

  /// The first message.
  const std::string& hello() const { return hello_; }

  /// How many more bytes of the challenge or the verdict to read; 0 once decided.
  std::size_t wanted() const;

  /// Consumes `bytes` (at most wanted()). Returns the proof to send once the challenge is complete; accepts once the
  /// verdict is the acceptor's proof; a malformed challenge, the refusal or a wrong proof refuses (see reason(),
  /// no_gate()).
  std::string feed(std::string_view bytes);

  outcome state() const { return state_; }
  const std::string& reason() const { return reason_; }
  /// The peer answered something other than the gate's magic: it is not a gated actorllm endpoint (a TLS one, or
  /// another program).
  bool no_gate() const { return no_gate_; }
  /// The challenge was good and our proof is out: the verdict is what remains.
  bool proved() const { return !peer_nonce_.empty(); }

 private:
  std::string key_;
  std::string own_nonce_;
  std::string peer_nonce_;  ///< the acceptor's, once its challenge is in
  std::string hello_;
  std::string received_;
  outcome state_ = outcome::pending;
  std::string reason_;
  bool no_gate_ = false;
};

/// Why connect_through_gate failed.
struct gate_failure {
  /// The peer closed, timed out or answered without the gate's magic: it may speak TLS, or not be actorllm.
  bool no_gate = false;
  std::string message;
};

/// Runs the connector's side on the connected socket `fd` (blocking or not) within `timeout`. Reads exactly the
/// gate's bytes, so what follows on the socket is left for CAF. nullopt: the peer proved the key.
std::optional<gate_failure> connect_through_gate(int fd, const std::string& key, std::chrono::milliseconds timeout);

/// HMAC-SHA256 of `message` under `key` (32 bytes), for the handshake and its tests.
std::string hmac_sha256(std::string_view key, std::string_view message);

}  // namespace actorllm::actors::gate
