// What the engine sends a submitter after a step: the deltas of its streaming requests, the final outputs of the
// requests that finished, and the requests that failed. One message per submitter per step, however many of its
// requests made progress.
#pragma once

#include "actorllm/error.hpp"
#include "actorllm/proto/request_output.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::proto {

/// A request that ended in an error (rejected at submission, or lost to an engine failure).
struct request_failure {
  uint64_t request_id = 0;
  errc code = errc::internal;
  std::string message;

  friend bool operator==(const request_failure&, const request_failure&) = default;
};

/// CAF inspection of request_failure.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_failure& x) {
  return f(caf::meta::type_name("request_failure"), x.request_id, x.code, x.message);
}

/// One step's news for one submitter. Deltas come before outputs: a request's last delta precedes its output.
struct output_batch {
  std::vector<stream_delta> deltas;
  std::vector<request_output> outputs;
  std::vector<request_failure> failures;

  bool empty() const { return deltas.empty() && outputs.empty() && failures.empty(); }
  friend bool operator==(const output_batch&, const output_batch&) = default;
};

/// CAF inspection of output_batch.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, output_batch& x) {
  return f(caf::meta::type_name("output_batch"), x.deltas, x.outputs, x.failures);
}

}  // namespace actorllm::proto
