// A shard's side of the step protocol (vLLM's persistent batch / CachedRequestState): the block table of every
// sequence the plans scheduled and did not drop, kept from step to step so that a plan ships only new block ids,
// and the model::forward_batch each plan is run as. A plain class (no CAF runtime: it reads the protocol structs).
#pragma once

#include "actorllm/proto/step_plan.hpp"
#include "model/forward_batch.hpp"

#include <map>
#include <string>
#include <vector>

namespace actorllm::actors {

/// The block tables a shard holds, and the batch of the latest plan.
class persistent_batch {
 public:
  /// Applies `plan`'s diff (drops dropped_seqs' tables, then replaces or extends each scheduled sequence's) and
  /// rebuilds batch() for it. Returns what is wrong when the plan does not fit what this shard holds (blocks
  /// appended to a table it never got); the shard's tables are then unspecified, and the replica unusable.
  std::string apply(const proto::step_plan& plan);

  /// The plan last applied in the model's terms: tokens, positions, sample rows and each sequence's whole table.
  const model::forward_batch& batch() const { return batch_; }
  /// Sequences whose tables this shard holds.
  size_t size() const { return tables_.size(); }
  /// The table held for `seq` (null when none); for tests.
  const std::vector<int32_t>* table(proto::seq_ref seq) const;

 private:
  std::map<proto::seq_ref, std::vector<int32_t>> tables_;
  model::forward_batch batch_;  // reused from step to step
};

}  // namespace actorllm::actors
