// A shard's side of the step protocol (vLLM's persistent batch / CachedRequestState): the block table of every
// sequence the plans scheduled and did not drop, kept from step to step so that a plan ships only new block ids, and
// the model::forward_batch each plan is run as. The tables are extended in place, never copied: while a plan runs,
// the tables of its sequences are lent to the batch (moved in, moved back by the next apply).
// engine::shard_tables is the same diff protocol in its plainest form.
#pragma once

#include "engine/seq_id.hpp"
#include "engine/step_plan.hpp"
#include "model/forward_batch.hpp"

#include <map>
#include <string>
#include <vector>

namespace actorllm::runner {

/// The block tables a shard holds, and the batch of the latest plan.
class persistent_batch {
 public:
  /// Applies `plan`'s diff (drops dropped_seqs' tables, then replaces or extends each scheduled sequence's) and
  /// rebuilds batch() for it. Returns what is wrong when the plan does not fit what this shard holds (blocks
  /// appended to a table it never got, a sequence scheduled twice); the shard's tables are then unspecified, and
  /// the replica unusable.
  std::string apply(const engine::step_plan& plan);

  /// The plan last applied in the model's terms: tokens, positions, sample rows and each sequence's whole table.
  const model::forward_batch& batch() const { return batch_; }
  /// Sequences whose tables this shard holds.
  size_t size() const { return tables_.size(); }
  /// The table held for `seq` (null when none); for tests.
  const std::vector<int32_t>* table(engine::seq_id seq) const;

 private:
  struct held_table {
    std::vector<int32_t> blocks;  // empty while lent
    int32_t lent_to = -1;         // the batch sequence that holds the blocks now; -1: none
  };

  /// Moves the tables lent to the batch back.
  void take_back();

  std::map<engine::seq_id, held_table> tables_;
  std::vector<engine::seq_id> lent_;  // the sequence of each batch_.sequences entry whose table is lent
  model::forward_batch batch_;        // reused from step to step
};

}  // namespace actorllm::runner
