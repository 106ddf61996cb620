// The shards' side of the block-table diff (engine/block_table_mirror.hpp is the scheduler's): the whole block table
// of every sequence the plans scheduled and did not drop, rebuilt from the plans alone, applied in the order they
// were sent. The reference for the runner's persistent batch, and what tests read whole tables from.
#pragma once

#include "engine/block_allocator.hpp"
#include "engine/seq_id.hpp"
#include "engine/step_plan.hpp"

#include <map>
#include <string>
#include <vector>

namespace actorllm::engine {

/// The block tables a shard holds after the plans applied so far.
class shard_tables {
 public:
  /// Applies `plan`'s diff: drops the tables of dropped_seqs, then replaces (new_table) or extends each scheduled
  /// sequence's table. Returns what is wrong when the plan does not fit what is held (blocks appended to a table
  /// never sent); the tables are then unspecified.
  std::string apply(const step_plan& plan);

  /// The table held for `seq` (null when none).
  const std::vector<block_id>* table(seq_id seq) const;
  /// Sequences whose tables are held.
  size_t size() const { return tables_.size(); }

 private:
  std::map<seq_id, std::vector<block_id>> tables_;
};

}  // namespace actorllm::engine
