// The identity of one output sequence: a request with n > 1 has n sequences sharing its prompt.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

namespace actorllm::engine {

/// Names one output sequence. Derived from the request, never allocated: sequence `index` (0 .. n-1) of request
/// `request_id`, so the engine, the scheduler and the shards agree on it without a lookup table.
struct seq_id {
  uint64_t request_id = 0;  ///< the request this sequence belongs to
  uint32_t index = 0;       ///< which of the request's n output sequences (0 is the one that prefills the prompt)

  friend auto operator<=>(const seq_id&, const seq_id&) = default;
};

/// Serialization in CAF's inspect protocol (a template: the engine itself does not depend on CAF): the request id,
/// then the index. The step protocol carries seq_ids as they are (proto::seq_ref).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, seq_id& x) {
  return f(x.request_id, x.index);
}

/// "request_id-index", as vLLM names its sequences in logs.
inline std::string to_string(seq_id id) { return std::to_string(id.request_id) + "-" + std::to_string(id.index); }

}  // namespace actorllm::engine
