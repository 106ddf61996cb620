// The control plane's network (DESIGN.md §2): CAF's middleman with heartbeats and connection timeouts on, and one of
// two transports, both authenticated before CAF parses a byte: plaintext TCP behind the control gate (each side
// proves the shared key first, gated_multiplexer.hpp), or TLS (certificates of one CA, checked both ways) with the
// same gate inside it, ended in actorllm's own threads (tls_relay.hpp), not by CAF's OpenSSL module. Every process
// that publishes or connects to an actor of another process (engine, worker, node agent, head, `status`, `check`)
// goes through publish_control/connect_control, so one setting decides the transport of all of them.
// The data plane (Gloo's TCP transport) has no TLS: tensors between workers travel in the clear.
#pragma once

#include "actors/cluster/basp_screen.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>
#include <caf/io/middleman.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actorllm::actors {

/// TLS for the control plane. All three PEM files or none: every node presents a certificate signed by the
/// cluster's CA and accepts only peers that do the same (a node without them, or with another CA, cannot connect).
struct control_tls {
  std::string certificate;  ///< this process's certificate (PEM); $ACTORLLM_TLS_CERT
  std::string key;          ///< its private key (PEM, not encrypted); $ACTORLLM_TLS_KEY
  std::string ca_file;      ///< the CA certificate(s) peers must be signed by (PEM); $ACTORLLM_TLS_CA

  bool enabled() const { return !certificate.empty() || !key.empty() || !ca_file.empty(); }

  /// `given` with each empty field taken from $ACTORLLM_TLS_CERT, $ACTORLLM_TLS_KEY, $ACTORLLM_TLS_CA.
  static control_tls from_environment(control_tls given = {});

  /// The settings `sys` was started with (through enable_network).
  static control_tls of(const caf::actor_system& sys);

  /// Throws actorllm::error (invalid_config) when only some files are given, a file cannot be read or parsed,
  /// the key does not belong to the certificate, or the certificate is not signed by the CA; the message names the
  /// flag, the variable and the file.
  void check() const;

  /// The ACTORLLM_TLS_* variables that give a child process these settings (empty when disabled).
  std::vector<std::pair<std::string, std::string>> environment() const;
};

/// Loads CAF's middleman into `cfg` with BASP heartbeats and a connection timeout switched on (they are off by
/// default in CAF 0.17), so a peer that stops answering is dropped within seconds. Every connection passes the
/// control gate with `control_key` (the cluster token; an engine's own random key for its mp workers): a peer that
/// cannot prove it is dropped before CAF reads anything. With `tls` enabled (call tls.check() first), the gate runs
/// inside mutually authenticated TLS. What a peer sends after the gate is screened (basp_screen.hpp): a payload over
/// `max_message_bytes` (0: $ACTORLLM_CONTROL_MAX_MESSAGE_BYTES, else default_max_control_message_bytes) or a
/// malformed message ends that connection. Peers met through a third node
/// (a worker and the next stage's worker, both connected to the engine) are reached through it: CAF 0.17's automatic
/// direct connections lost messages (a step that never finished, most likely) and kept a dead worker's proxies alive
/// on the indirect route. Throws actorllm::error (invalid_config) when `control_key` is too weak for a cluster token
/// (check_cluster_token).
void enable_network(caf::actor_system_config& cfg, const control_tls& tls, const std::string& control_key,
                    std::size_t max_message_bytes = 0);

/// The environment variable that gives a worker process its engine's control key.
inline constexpr const char* control_key_variable = "ACTORLLM_CONTROL_KEY";

/// The environment variable that gives a worker process its launcher's --max-control-message-bytes.
inline constexpr const char* control_message_limit_variable = "ACTORLLM_CONTROL_MAX_MESSAGE_BYTES";

/// The message limit `sys` was started with (enable_network), as the value of control_message_limit_variable.
std::string control_message_limit_of(const caf::actor_system& sys);

/// A fresh random control key (64 hex digits), for an engine whose workers are its own children.
std::string new_control_key();

/// True for addresses only this machine can reach: 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

/// One line for the logs saying how the control plane listening on `host` is protected.
std::string describe_control_transport(const std::string& host, bool tls);

/// Publishes `whom` on host:port (port 0: any free one), over TLS when the system has it (enable_network).
template <class Handle>
caf::expected<uint16_t> publish_control(const Handle& whom, uint16_t port, const std::string& host) {
  return whom.home_system().middleman().publish(whom, port, host.c_str(), true);
}

/// Connects to the actor published at host:port, over TLS when the system has it. The error of a failed TLS
/// handshake is explained by describe_connect_error.
template <class Handle>
caf::expected<Handle> connect_control(caf::actor_system& sys, const std::string& host, uint16_t port) {
  return sys.middleman().template remote_actor<Handle>(host, port);
}

/// `err` of connect_control rendered, with a hint when the connection broke during the handshake (TLS on one side
/// only, or certificates of different CAs).
std::string describe_connect_error(caf::actor_system& sys, const caf::error& err);

}  // namespace actorllm::actors
