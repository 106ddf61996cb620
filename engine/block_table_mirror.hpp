// What the shards of a replica already hold of each sequence's block table, kept on the scheduler's side (inside
// scheduler_core) so that a step's plan ships only the difference (vLLM's scheduled_new_reqs /
// scheduled_cached_reqs.new_block_ids / finished_req_ids). Every shard applies every plan in the order the scheduler
// sent them, so one mirror stands for all of them; with pp_size plans in flight it runs ahead of the slowest stage,
// which catches up plan by plan.
#pragma once

#include "engine/block_allocator.hpp"
#include "engine/seq_id.hpp"

#include <map>
#include <span>
#include <vector>

namespace actorllm::engine {

/// What the shards must do to one scheduled sequence's block table.
struct table_delta {
  bool new_table = false;        ///< replace (or create) the table with `blocks`; otherwise append them
  std::vector<block_id> blocks;  ///< the whole table, or the blocks appended since the last plan that scheduled it
};

/// The block tables as the shards hold them after every plan sent so far.
class block_table_mirror {
 public:
  /// The delta that brings the shards' table of `seq` to `table` (the sequence is scheduled in the plan being
  /// built), and records `table` as theirs. A sequence the shards do not hold, or whose held table is not a prefix
  /// of `table`, gets its whole table.
  table_delta update(seq_id seq, std::span<const block_id> table);

  /// `seq` finished or was preempted: its table is gone (a later update sends it whole again), and the next plan
  /// tells the shards to drop theirs. Unknown sequences are ignored.
  void forget(seq_id seq);

  /// The sequences forgotten since the last call: the next plan's dropped_seqs.
  std::vector<seq_id> take_dropped();

  /// Sequences whose tables the shards hold.
  size_t size() const { return tables_.size(); }
  /// The table the shards hold for `seq` (null when none); for tests.
  const std::vector<block_id>* table(seq_id seq) const;

 private:
  std::map<seq_id, std::vector<block_id>> tables_;
  std::vector<seq_id> dropped_;
};

}  // namespace actorllm::engine
