// One step of continuous batching as the scheduler hands it to the workers, and what they hand back.
#pragma once

#include "engine/block_allocator.hpp"
#include "engine/seq_id.hpp"
#include "model/forward_batch.hpp"

#include <cstdint>
#include <vector>

namespace actorllm::engine {

/// Everything the shards need for one forward step. Sequences in a plan are not scheduled again until the plan's
/// result has been passed to scheduler_core::update_from_output (or the sequence was aborted/finished meanwhile).
struct step_plan {
  uint64_t step_id = 0;  ///< increasing per scheduler; names the plan in update_from_output
  /// The flattened batch: running decodes first (one token each), then prefill chunks.
  model::forward_batch batch;
  std::vector<seq_id> batch_seqs;   ///< the sequence of each batch.sequences entry, same order
  std::vector<seq_id> sample_seqs;  ///< the sequence each batch.sample_rows entry samples for, same order
  /// Prompt scoring (request::score_prompt): batch row score_rows[i] is prompt position score_positions[i] of
  /// score_seqs[i], whose logits score the prompt token score_tokens[i] that follows it.
  std::vector<int32_t> score_rows;
  std::vector<seq_id> score_seqs;
  std::vector<int32_t> score_positions;
  std::vector<int32_t> score_tokens;
  std::vector<seq_id> preempted;  ///< sequences preempted (blocks freed, back to waiting) while building this plan
};

}  // namespace actorllm::engine
