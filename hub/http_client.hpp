// A small blocking HTTP/1.1 client for the Hub: one request per connection, http or https (certificates checked
// against the system's store, or $SSL_CERT_FILE / $SSL_CERT_DIR as OpenSSL reads them; SNI sent), no redirect
// followed (the caller decides where a token may go), bodies streamed to a sink as they arrive, and a timeout on
// every wait so a stalled server cannot hang the start-up. The only file of hub/ with Beast and asio.
#pragma once

#include "hub/hub_error.hpp"
#include "hub/url.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actorllm::hub {

/// One request: GET or HEAD, no body.
struct http_request {
  std::string method = "GET";
  url target;
  std::vector<std::pair<std::string, std::string>> headers;  ///< besides Host, User-Agent, Accept-Encoding
};

/// The status, headers and (small) body of an answer.
struct http_response {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  ///< names in lower case, in arrival order
  std::string body;  ///< the body of a non-2xx answer (its first 64 KiB), or of a 2xx answer read without a sink

  /// The first header named `name` (any case), nullopt when absent.
  std::optional<std::string> header(std::string_view name) const;
};

/// A body that stopped before its announced end (the connection closed, or the server went quiet past the
/// timeout). What arrived before has been given to the sink: continue with a Range request.
struct transfer_interrupted : hub_error {
  using hub_error::hub_error;
};

/// Receives a body piece by piece.
using body_sink = std::function<void(std::string_view piece)>;

/// Sees an answer's status and headers before its body is read (and may throw to abandon it).
using head_hook = std::function<void(const http_response& head)>;

/// Sends requests; holds the TLS context (built on first https use).
class http_client {
 public:
  /// `timeout` bounds each wait: resolving and connecting, the TLS handshake, and every read or write. `ca_file`:
  /// a PEM bundle of the CAs to trust instead of the system's store (empty: the system's).
  explicit http_client(std::chrono::milliseconds timeout, std::string ca_file = {});
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  /// Sends `request` and reads the answer. `on_head`, when given, sees the status and headers first. A 2xx body
  /// goes to `sink` when one is given, else into the answer's body (at most `max_body` bytes, more is an error).
  /// Throws hub_error when the server cannot be reached, the certificate is not trusted, or the answer is
  /// malformed; transfer_interrupted when a body stops early.
  http_response send(const http_request& request, const body_sink& sink = {}, const head_hook& on_head = {},
                     uint64_t max_body = 64u << 20);

 private:
  struct tls_state;
  std::chrono::milliseconds timeout_;
  std::string ca_file_;
  std::unique_ptr<tls_state> tls_;
};

}  // namespace actorllm::hub
