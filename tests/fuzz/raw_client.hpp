// The HTTP fuzzer's client: plays one fuzz_case on its own connection over raw sockets (no HTTP library between the
// bytes and the server) and judges what comes back. The judgement is about the server's robustness, not its routes:
// every answer must be a well-framed HTTP/1.1 response with an expected status, and the connection must be answered
// or closed within a bound (else it is a hang).
#pragma once

#include "fuzz/http_mutator.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::fuzz {

/// What one case's connection got back.
struct case_outcome {
  std::vector<int> statuses;  ///< the statuses of the complete responses, in order
  bool closed = false;        ///< the server closed or reset the connection
  std::size_t received = 0;   ///< bytes received
  std::string problem;        ///< empty: fine; else why this case is a failure
};

/// Plays `c` against 127.0.0.1:`port`. Within `hang_bound` of the client's last byte the connection must close, or
/// (only for a client holding its side open) rest after complete keep-alive answers; a status outside
/// `allowed_statuses` (empty: any) is a problem too.
case_outcome run_case(uint16_t port, const fuzz_case& c, std::chrono::milliseconds hang_bound,
                      const std::vector<int>& allowed_statuses);

/// Sends "GET `target`" on a new connection and returns the status of the answer, or 0 when none came within
/// `bound` (then `why` says what happened).
int probe(uint16_t port, const std::string& target, std::chrono::milliseconds bound, std::string& why);

/// Parses `raw` as a sequence of HTTP/1.1 responses: appends their statuses and returns where the first incomplete one
/// begins (raw.size() when all are complete). A malformed response sets `problem`. `closed`: the server closed after
/// `raw`, which completes a response framed by the connection's end. `last_closes` says whether the last complete
/// response announced `Connection: close`.
std::size_t parse_responses(const std::string& raw, bool closed, std::vector<int>& statuses, bool& last_closes,
                            std::string& problem);

}  // namespace actorllm::fuzz
