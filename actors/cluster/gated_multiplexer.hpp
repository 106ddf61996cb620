// CAF's network backend with the control gate (control_gate.hpp) and the BASP screen (basp_screen.hpp) in front of
// CAF's parser, on every connection, with TLS or without:
//   - accepting: the gate thread accepts (backing off at the descriptor limit instead of spinning), runs the TLS
//     handshake when TLS is on and then the gate handshake inside it, all non-blocking under one deadline and a cap
//     on pending handshakes, and only then gives the broker the socket (with TLS, the plaintext end of a relay,
//     tls_relay.hpp);
//   - connecting: TLS and the gate complete before CAF writes a byte;
//   - CAF reads every connection through a scribe that screens the peer's BASP stream first and ends the
//     connection (not the process) at the first malformed header or payload.
#pragma once

#include "actors/cluster/basp_screen.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace actorllm::actors {

/// How long either side of the gate (TLS and the gate's exchange together) waits for the other before giving up on
/// a connection.
inline constexpr std::chrono::milliseconds gate_timeout{5000};
/// Handshakes the acceptor runs at once; beyond it the oldest is dropped (a flood of silent connections cannot hold
/// more than this many sockets).
inline constexpr std::size_t max_pending_gates = 256;
/// How long the gate thread stops accepting after accept() failed for want of descriptors or memory.
inline constexpr std::chrono::milliseconds accept_backoff{100};

/// What the gated backend needs besides CAF's settings.
struct gate_settings {
  std::string key;  ///< the secret both sides of every connection prove (the cluster token, or an engine's own key)
  /// TLS: all three PEM files or none (then plaintext behind the gate).
  std::string tls_certificate;
  std::string tls_key;
  std::string tls_ca_file;
  /// The largest BASP payload a peer may send (--max-control-message-bytes).
  std::size_t max_message_bytes = default_max_control_message_bytes;
};

/// Loads CAF's middleman into `cfg` over the gated backend with `settings`.
void load_gated_middleman(caf::actor_system_config& cfg, const gate_settings& settings);

/// The largest BASP payload `sys` takes from a peer (load_gated_middleman).
std::size_t control_message_limit(const caf::actor_system& sys);

/// The key `sys` was started with (load_gated_middleman); empty when none.
std::string control_key_of(const caf::actor_system& sys);

/// Whether `err` (of a connection attempt) is the gate's final refusal: the peer holds another key. Retrying
/// cannot help, unlike a peer that is not up yet.
bool refused_at_gate(const caf::error& err);

/// Connections refused at the gate (or its TLS handshake) since the process started (all systems), for tests and
/// logs.
uint64_t gate_refusals();

/// Connections the BASP screen ended since the process started (all systems), for tests and logs.
uint64_t screen_refusals();

/// Times accept() failed for want of descriptors or memory and the gate thread backed off, for tests and logs.
uint64_t accept_backoffs();

}  // namespace actorllm::actors
