// The engine asks the scheduler to finish sequences whose text reached a stop string (which only the engine's
// detokenizer can see); their KV blocks are freed when the scheduler reads this.
#pragma once

#include "actorllm/proto/step_plan.hpp"

#include <caf/meta/type_name.hpp>

#include <vector>

namespace actorllm::proto {

/// Sequences that stopped (finish_reason stop).
struct finish_sequences {
  std::vector<seq_ref> seqs;

  friend bool operator==(const finish_sequences&, const finish_sequences&) = default;
};

/// CAF inspection of finish_sequences.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, finish_sequences& x) {
  return f(caf::meta::type_name("finish_sequences"), x.seqs);
}

}  // namespace actorllm::proto
