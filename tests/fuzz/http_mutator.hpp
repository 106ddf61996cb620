// The HTTP fuzzer's inputs: one case is what one client does on one connection (the bytes, how they are sent, how the
// client ends), generated from a seed by a grammar of HTTP/1.1 requests (request lines, headers, Content-Length and
// chunked bodies, trailers, pipelining) followed by byte-level mutations. Deterministic: the same seed gives the same
// case, so a failure reproduces from the seed alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::fuzz {

/// What the generated requests may aim at and how big the server lets them be (to aim at and just past its limits).
struct target_profile {
  /// Picked evenly (repeat one to weight it); the defaults are test_server's routes.
  std::vector<std::string> paths{"/json", "/json", "/json", "/stream", "/stream",        "/late",
                                 "/late", "/big",  "/drop", "/throw",  "/cancel-throws", "/no/such/route"};
  std::size_t max_header_bytes = 8 * 1024;
  std::size_t max_body_bytes = 4096;
};

/// How the client ends its side once its bytes are sent.
enum class client_ending {
  half_close,    ///< shutdown(SHUT_WR), then read until the server closes
  hold_open,     ///< keep the connection open and read: the server must answer (408 at the latest) or close
  reset,         ///< close with RST at once, reading nothing
  close_unread,  ///< close normally at once, reading nothing
};

/// One fuzz input.
struct fuzz_case {
  uint64_t seed = 0;
  std::vector<std::string> pieces;  ///< the bytes, in the pieces they are written in
  bool slow = false;                ///< pause between pieces (a byte-at-a-time or trickling client)
  client_ending ending = client_ending::half_close;
  int requests = 0;  ///< how many requests the grammar produced (before mutations)

  /// All the bytes.
  std::string bytes() const;
  /// A one-line summary and the bytes (escaped, long runs elided) for a failure report.
  std::string describe() const;
};

/// The case for `seed` against a server shaped like `profile`.
fuzz_case generate_case(uint64_t seed, const target_profile& profile);

/// `bytes` with control and non-ASCII bytes escaped and runs of one byte over 32 long elided ("a{x70000}").
std::string escape_bytes(const std::string& bytes, std::size_t max_chars = 4000);

}  // namespace actorllm::fuzz
