// A shard's persistent block tables.
#include "runner/persistent_batch.hpp"

#include <fmt/format.h>

namespace actorllm::runner {

void persistent_batch::take_back() {
  for (size_t i = 0; i < lent_.size(); ++i) {
    held_table& held = tables_.at(lent_[i]);
    held.blocks = std::move(batch_.sequences[i].block_table);
    held.lent_to = -1;
  }
  lent_.clear();
}

std::string persistent_batch::apply(const engine::step_plan& plan) {
  take_back();
  for (const auto& seq : plan.dropped_seqs)
    tables_.erase(seq);
  batch_.tokens = plan.tokens;
  batch_.positions = plan.positions;
  // The last stage computes the logits of the sample rows, then of the score rows (prompt logprobs).
  batch_.sample_rows = plan.sample_rows;
  batch_.sample_rows.insert(batch_.sample_rows.end(), plan.score_rows.begin(), plan.score_rows.end());
  batch_.sequences.resize(plan.sequences.size());
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const engine::scheduled_sequence& s = plan.sequences[i];
    auto it = tables_.find(s.seq);
    if (s.new_table) {
      if (it == tables_.end())
        it = tables_.try_emplace(s.seq).first;
      else if (it->second.lent_to >= 0)
        return fmt::format("step {} schedules sequence {} twice", plan.step_id, engine::to_string(s.seq));
      it->second.blocks.assign(s.blocks.begin(), s.blocks.end());
    } else {
      if (it == tables_.end())
        return fmt::format("step {} appends blocks to sequence {}, whose block table this shard does not hold",
                           plan.step_id, engine::to_string(s.seq));
      if (it->second.lent_to >= 0)
        return fmt::format("step {} schedules sequence {} twice", plan.step_id, engine::to_string(s.seq));
      it->second.blocks.insert(it->second.blocks.end(), s.blocks.begin(), s.blocks.end());
    }
    model::batch_sequence& out = batch_.sequences[i];
    out.query_begin = s.query_begin;
    out.n_query = s.n_query;
    out.block_table = std::move(it->second.blocks);  // lent until the next apply: no copy
    out.lora_id = s.lora_id;
    it->second.lent_to = static_cast<int32_t>(i);
    lent_.push_back(s.seq);
  }
  return {};
}

const std::vector<int32_t>* persistent_batch::table(engine::seq_id seq) const {
  auto it = tables_.find(seq);
  if (it == tables_.end())
    return nullptr;
  if (it->second.lent_to >= 0)
    return &batch_.sequences[static_cast<size_t>(it->second.lent_to)].block_table;
  return &it->second.blocks;
}

}  // namespace actorllm::runner
