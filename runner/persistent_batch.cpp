// A shard's persistent block tables.
#include "runner/persistent_batch.hpp"

#include <fmt/format.h>

namespace actorllm::actors {

std::string persistent_batch::apply(const proto::step_plan& plan) {
  for (const auto& seq : plan.dropped_seqs)
    tables_.erase(seq);
  batch_.tokens = plan.tokens;
  batch_.positions = plan.positions;
  // The last stage computes the logits of the sample rows, then of the score rows (prompt logprobs).
  batch_.sample_rows = plan.sample_rows;
  batch_.sample_rows.insert(batch_.sample_rows.end(), plan.score_rows.begin(), plan.score_rows.end());
  batch_.sequences.resize(plan.sequences.size());
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const proto::scheduled_sequence& s = plan.sequences[i];
    std::vector<int32_t>* table = nullptr;
    if (s.new_table) {
      table = &tables_[s.seq];
      *table = s.blocks;
    } else {
      auto it = tables_.find(s.seq);
      if (it == tables_.end())
        return fmt::format("step {} appends blocks to sequence {}-{}, whose block table this shard does not hold",
                           plan.step_id, s.seq.request_id, s.seq.index);
      table = &it->second;
      table->insert(table->end(), s.blocks.begin(), s.blocks.end());
    }
    model::batch_sequence& out = batch_.sequences[i];
    out.query_begin = s.query_begin;
    out.n_query = s.n_query;
    out.block_table = *table;
    out.lora_id = s.lora_id;
  }
  return {};
}

const std::vector<int32_t>* persistent_batch::table(proto::seq_ref seq) const {
  auto it = tables_.find(seq);
  return it == tables_.end() ? nullptr : &it->second;
}

}  // namespace actorllm::actors
