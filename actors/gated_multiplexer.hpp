// CAF's network backend with the control gate (control_gate.hpp) in front of BASP: every plaintext connection this
// process accepts completes the gate handshake in a thread of its own before CAF's multiplexer sees the socket, and
// every connection it opens completes it before CAF writes to it. CAF's OpenSSL module brings its own sockets:
// with TLS, mutual certificate checks play the gate's part.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace actorllm::actors {

/// How long either side of the gate waits for the other before giving up on a connection.
inline constexpr std::chrono::milliseconds gate_timeout{5000};
/// Handshakes the acceptor runs at once; beyond it the oldest is dropped (a flood of silent connections cannot hold
/// more than this many sockets).
inline constexpr std::size_t max_pending_gates = 256;

/// Loads CAF's middleman into `cfg` over the gated backend, with `key` as the secret both sides of every
/// connection must prove (the cluster token, or an engine's own key for its workers).
void load_gated_middleman(caf::actor_system_config& cfg, const std::string& key);

/// The key `sys` was started with (load_gated_middleman); empty when none.
std::string control_key_of(const caf::actor_system& sys);

/// Whether `err` (of a connection attempt) is the gate's final refusal: the peer holds another key. Retrying
/// cannot help, unlike a peer that is not up yet.
bool refused_at_gate(const caf::error& err);

/// Connections refused at the gate since the process started (all systems), for tests and logs.
uint64_t gate_refusals();

}  // namespace actorllm::actors
