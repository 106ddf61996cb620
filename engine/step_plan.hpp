// One step of continuous batching as scheduler_core::schedule() hands it out and the scheduler actor sends it to
// every shard of the replica: the flattened batch (tokens, positions, sample rows), each scheduled sequence's block
// table as a diff against what the shards already hold, the sequences whose tables the shards drop, and the sampler
// bookkeeping (which sequence each sample row belongs to, sampler state to create and to drop). vLLM's
// SchedulerOutput: new vs. cached requests, new_block_ids, finished_req_ids. Plain structs: their CAF inspection is in
// include/actorllm/proto/step_plan.hpp.
#pragma once

#include "engine/block_allocator.hpp"
#include "engine/request.hpp"
#include "engine/seq_id.hpp"

#include <cstdint>
#include <vector>

namespace actorllm::engine {

/// One scheduled sequence's rows of the flattened batch and the KV blocks the shards must add to its block table:
/// with `new_table`, `blocks` is the whole table (a sequence the shards do not hold: new, re-admitted after a
/// preemption, or whose table changed other than by appending); otherwise the blocks appended since the last plan
/// that scheduled it (often none).
struct scheduled_sequence {
  seq_id seq;
  int32_t query_begin = 0;
  int32_t n_query = 0;
  bool new_table = false;
  std::vector<block_id> blocks;
  int32_t lora_id = 0;  ///< the LoRA adapter its rows apply (step_plan::loras names it); 0: the base model

  friend bool operator==(const scheduled_sequence&, const scheduled_sequence&) = default;
};

/// Sampler state to create for a request the first time one of its rows is sampled or scored.
struct sampler_setup {
  uint64_t request_id = 0;
  ops::sampling_spec spec;
  std::vector<int32_t> prompt_ids;  ///< for the repetition penalty; empty when that penalty is off
  /// Failover: sequence 0's output so far (a request resumed on this replica). The sampler starts from the state it
  /// had after them: penalties and min_tokens see them, the generator has advanced once per token, a structured
  /// output's automaton has consumed them.
  std::vector<int32_t> resume_output_ids;

  friend bool operator==(const sampler_setup&, const sampler_setup&) = default;
};

/// Everything the shards need for one step. Sequences in a plan are not scheduled again until the plan's result has
/// been passed to scheduler_core::update_from_output (or the sequence was aborted or finished meanwhile).
///
/// Every shard applies the plans in the order they were sent: it first drops the block tables of dropped_seqs, then
/// applies each scheduled sequence's blocks to its table (shard_tables does it as the shards do), and runs its layers
/// over the batch (block tables may repeat block ids across sequences: shared prefix blocks, which no step writes).
/// The sampler shard first drops the sampler state of released_requests, then creates new_requests', then samples
/// sample_rows[i] for sample_seqs[i].
struct step_plan {
  uint64_t step_id = 0;            ///< increasing per scheduler; names the plan in update_from_output
  std::vector<int32_t> tokens;     ///< [n_tokens] token ids (read by the first stage): decodes first, then prefills
  std::vector<int32_t> positions;  ///< [n_tokens] absolute positions
  std::vector<scheduled_sequence> sequences;
  std::vector<seq_id> dropped_seqs;  ///< finished or preempted since the last plan: the shards forget their tables
  std::vector<int32_t> sample_rows;  ///< rows whose logits are sampled, in this order
  std::vector<seq_id> sample_seqs;   ///< the sequence of each sample row
  /// Prompt logprobs (request::score_prompt): row score_rows[i] is prompt position score_positions[i] of
  /// score_seqs[i], whose logits score the prompt token score_tokens[i] that follows it; the last stage computes
  /// their logits after the sample rows'.
  std::vector<int32_t> score_rows;
  std::vector<seq_id> score_seqs;
  std::vector<int32_t> score_positions;
  std::vector<int32_t> score_tokens;
  std::vector<sampler_setup> new_requests;  ///< requests whose first sample or score row is in this plan
  std::vector<uint64_t> released_requests;  ///< requests that ended since the last plan, after their setup went out
  std::vector<lora_ref> loras;              ///< every LoRA adapter a scheduled sequence applies (each once)
  /// Lockstep expert parallelism: a step with no tokens (every list above empty, no result expected), sent while
  /// another replica's step runs, so that this replica's shards join its MoE layers' exchanges and serve their
  /// experts (vLLM's dummy batch of an idle data-parallel rank).
  bool idle = false;

  /// Query tokens of the step.
  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }

  friend bool operator==(const step_plan&, const step_plan&) = default;
};

}  // namespace actorllm::engine
