// The shards' block tables, rebuilt from the plans.
#include "engine/shard_tables.hpp"

#include <fmt/format.h>

namespace actorllm::engine {

std::string shard_tables::apply(const step_plan& plan) {
  for (const seq_id& seq : plan.dropped_seqs)
    tables_.erase(seq);
  for (const scheduled_sequence& s : plan.sequences) {
    if (s.new_table) {
      tables_[s.seq] = s.blocks;
      continue;
    }
    auto it = tables_.find(s.seq);
    if (it == tables_.end())
      return fmt::format("step {} appends blocks to sequence {}, whose block table this shard does not hold",
                         plan.step_id, to_string(s.seq));
    it->second.insert(it->second.end(), s.blocks.begin(), s.blocks.end());
  }
  return {};
}

const std::vector<block_id>* shard_tables::table(seq_id seq) const {
  auto it = tables_.find(seq);
  return it == tables_.end() ? nullptr : &it->second;
}

}  // namespace actorllm::engine
