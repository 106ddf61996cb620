// TLS for the control plane without CAF's OpenSSL module (issue 30, items 3 and 4). CAF 0.17.6's module parsed
// BASP from any peer whose certificate the CA signed, so the cluster token was never checked before CAF's parser;
// it loaded the certificate files again for every connection (at the descriptor limit that failure aborted the
// process), and it polled a connection that never started TLS in a busy loop. Here TLS ends in actorllm's own
// threads, and CAF only ever sees a plaintext socket:
//   - tls_context: the certificate, key and CA loaded once, into one OpenSSL context, mutual verification on;
//   - the handshakes (TLS, then the control gate inside it) run non-blocking, with the gate's deadline, in the gate
//     thread (acceptor) or the connecting thread (connector), see gated_multiplexer.hpp;
//   - tls_relay: one thread that carries every established connection between its TLS socket and one end of a
//     socketpair whose other end is CAF's, with bounded buffers and poll(), never spinning.
#pragma once

#include "actors/cluster/control_gate.hpp"

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

struct ssl_st;
struct ssl_ctx_st;

namespace actorllm::actors {

/// One OpenSSL context for every control connection of a process: its certificate and key, and the CA every peer's
/// certificate must be signed by (both directions; TLS 1.2 at least).
class tls_context {
 public:
  /// Loads the three PEM files; throws actorllm::error (invalid_config) naming the file that failed.
  tls_context(const std::string& certificate, const std::string& key, const std::string& ca_file);
  ~tls_context();
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;

  /// A session on the connected socket `fd` (made non-blocking by the caller), the accepting or connecting end.
  /// Null when OpenSSL cannot make one.
  ssl_st* new_session(int fd, bool accepting) const;

 private:
  ssl_ctx_st* ctx_ = nullptr;
};

/// What step_tls_handshake says next.
enum class tls_step { done, want_read, want_write, failed };

/// One non-blocking step of the TLS handshake of `ssl`; on failure `reason` says why (OpenSSL's reason).
tls_step step_tls_handshake(ssl_st* ssl, bool accepting, std::string& reason);

/// Reads up to `n` bytes of plaintext from `ssl` into `out` (appending). want_read/want_write: nothing more now;
/// failed: the peer closed or the connection broke (`reason` says which).
tls_step tls_read(ssl_st* ssl, std::string& out, std::size_t n, std::string& reason);

/// Writes what it can of `data` (erasing what was written). done: all of it.
tls_step tls_write(ssl_st* ssl, std::string& data, std::string& reason);

/// The connector's side of the control gate inside TLS on the connected socket `fd`: the TLS handshake, then the
/// gate's exchange of control_gate.hpp, within `timeout`. On success `ssl` holds the session (the caller hands it
/// to a relay); nullopt means the peer proved the key and its certificate.
std::optional<gate::gate_failure> connect_through_tls_gate(int fd, const tls_context& tls, const std::string& key,
                                                           std::chrono::milliseconds timeout, ssl_st*& ssl);

/// The thread carrying established TLS connections to CAF's plaintext sockets (see the file comment).
class tls_relay {
 public:
  tls_relay();
  ~tls_relay();
  tls_relay(const tls_relay&) = delete;
  tls_relay& operator=(const tls_relay&) = delete;

  /// Takes `ssl` on the socket `net` and returns the socket for CAF (the other end of the pair the relay carries
  /// it to), or -1 when no socket pair could be made (then `ssl` and `net` are closed).
  int carry(ssl_st* ssl, int net);

  /// Connections being carried now.
  std::size_t carried() const;

 private:
  struct link;
  void wake();
  void run();

  int wake_[2] = {-1, -1};
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<link>> incoming_;
  std::size_t carried_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace actorllm::actors
