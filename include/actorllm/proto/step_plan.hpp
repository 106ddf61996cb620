// One step of continuous batching as the scheduler sends it to every shard of the replica: the flattened batch
// (tokens, positions, sample rows), each scheduled sequence's block table as a diff against what the shards already
// hold, the sequences whose tables the shards drop, and the sampler bookkeeping (which sequence each sample row
// belongs to, sampler state to create and to drop). vLLM's SchedulerOutput: new vs. cached requests, new_block_ids,
// finished_req_ids.
#pragma once

#include "engine/seq_id.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actorllm::proto {

/// Names one output sequence: sequence `index` of request `request_id`. The engine's own type, serialized through
/// its inspect overload (engine/seq_id.hpp), so the scheduler's sequence lists go into a plan without a copy per
/// field.
using seq_ref = engine::seq_id;

/// A LoRA adapter as the shards load it (vLLM's LoRARequest): `id` > 0 names it in plans (unique among the adapters
/// of one engine; a reloaded adapter gets a new id), `path` is its PEFT directory, `name` is for messages.
struct lora_ref {
  int32_t id = 0;
  std::string name;
  std::string path;

  friend bool operator==(const lora_ref&, const lora_ref&) = default;
};

/// CAF inspection of lora_ref.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, lora_ref& x) {
  return f(caf::meta::type_name("lora_ref"), x.id, x.name, x.path);
}

/// One scheduled sequence's rows of the flattened batch and the KV blocks the shards must add to its block table:
/// with `new_table`, `blocks` is the whole table (a sequence the shards do not hold: new, re-admitted after a
/// preemption, or whose table changed other than by appending); otherwise the blocks appended since the last plan
/// that scheduled it (often none).
struct scheduled_sequence {
  seq_ref seq;
  int32_t query_begin = 0;
  int32_t n_query = 0;
  bool new_table = false;
  std::vector<int32_t> blocks;
  int32_t lora_id = 0;  ///< the LoRA adapter its rows apply (step_plan::loras names it); 0: the base model

  friend bool operator==(const scheduled_sequence&, const scheduled_sequence&) = default;
};

/// CAF inspection of scheduled_sequence.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scheduled_sequence& x) {
  return f(caf::meta::type_name("scheduled_sequence"), x.seq, x.query_begin, x.n_query, x.new_table, x.blocks,
           x.lora_id);
}

/// The sampling knobs of one request, as the sampler shard applies them (kernels/cpu/sampling.hpp semantics).
struct sampler_spec {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t logprobs = -1;  ///< -1: none; 0: the sampled token's; k > 0: also the top k
  uint64_t seed = 0;      ///< sequence 0 draws from this seed; sequence i > 0 from a seed derived from it and i
  std::vector<int32_t> allowed_token_ids;             ///< non-empty: only these can be sampled
  std::vector<std::vector<int32_t>> bad_words;        ///< token sequences whose last token is banned after the rest
  int32_t min_tokens = 0;                             ///< min_tokens_stop_ids are masked before this many tokens
  std::vector<int32_t> min_tokens_stop_ids;           ///< eos (unless ignore_eos) and stop_token_ids
  std::vector<std::pair<int32_t, float>> logit_bias;  ///< added to the logits
  std::string structured_pattern;                     ///< structured outputs: the output must match it (empty: free)
  std::string tokenizer_dir;  ///< where the sampler finds the tokenizer the pattern's token masks need
  /// Structured outputs after a reasoning part: the pattern applies only to the tokens after the first sampled
  /// reasoning_end_token_id (the think-end token); -1: from the first output token (no reasoning part, or the
  /// prompt already ended it).
  int32_t reasoning_end_token_id = -1;
  int32_t prompt_logprobs = -1;  ///< -1: none; k >= 0: score rows report the prompt token's and the top k
  /// vLLM's logprob_token_ids: each sampled token reports these tokens' logprobs (in this order) instead of the top
  /// `logprobs`; empty: the top `logprobs`.
  std::vector<int32_t> logprob_token_ids;

  friend bool operator==(const sampler_spec&, const sampler_spec&) = default;
};

/// CAF inspection of sampler_spec.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampler_spec& x) {
  return f(caf::meta::type_name("sampler_spec"), x.temperature, x.top_p, x.top_k, x.min_p, x.repetition_penalty,
           x.presence_penalty, x.frequency_penalty, x.logprobs, x.seed, x.allowed_token_ids, x.bad_words, x.min_tokens,
           x.min_tokens_stop_ids, x.logit_bias, x.structured_pattern, x.tokenizer_dir, x.reasoning_end_token_id,
           x.prompt_logprobs, x.logprob_token_ids);
}

/// Sampler state to create for a request the first time one of its rows is sampled.
struct sampler_setup {
  uint64_t request_id = 0;
  sampler_spec spec;
  std::vector<int32_t> prompt_ids;  ///< for the repetition penalty; empty when that penalty is off
  /// Failover: sequence 0's output so far (a request resumed on this replica). The sampler starts from the state it
  /// had after them: penalties and min_tokens see them, the generator has advanced once per token, a structured
  /// output's automaton has consumed them.
  std::vector<int32_t> resume_output_ids;

  friend bool operator==(const sampler_setup&, const sampler_setup&) = default;
};

/// CAF inspection of sampler_setup.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampler_setup& x) {
  return f(caf::meta::type_name("sampler_setup"), x.request_id, x.spec, x.prompt_ids, x.resume_output_ids);
}

/// Everything the shards need for one step. Every shard applies the plans in the order they were sent: it first
/// drops the block tables of dropped_seqs, then applies each scheduled sequence's blocks to its table, and runs its
/// layers over the batch (block tables may repeat block ids across sequences: shared prefix blocks, which no step
/// writes). The sampler shard first drops the sampler state of released_requests, then creates new_requests', then
/// samples sample_rows[i] for sample_seqs[i].
struct step_plan {
  uint64_t step_id = 0;
  std::vector<int32_t> tokens;     ///< [n_tokens] token ids (read by the first stage)
  std::vector<int32_t> positions;  ///< [n_tokens] absolute positions
  std::vector<scheduled_sequence> sequences;
  std::vector<seq_ref> dropped_seqs;  ///< finished or preempted since the last plan: the shards forget their tables
  std::vector<int32_t> sample_rows;
  std::vector<seq_ref> sample_seqs;  ///< the sequence of each sample row
  /// Prompt logprobs: rows whose logits score the next prompt token (score_tokens[i], at prompt position
  /// score_positions[i] + 1, for score_seqs[i]); the last stage computes their logits after the sample rows'.
  std::vector<int32_t> score_rows;
  std::vector<seq_ref> score_seqs;
  std::vector<int32_t> score_positions;
  std::vector<int32_t> score_tokens;
  std::vector<sampler_setup> new_requests;
  std::vector<uint64_t> released_requests;  ///< requests that ended since the last plan
  std::vector<lora_ref> loras;              ///< every LoRA adapter a scheduled sequence applies (each once)
  /// Lockstep expert parallelism: a step with no tokens (every list above empty, no result expected), sent while
  /// another replica's step runs, so that this replica's shards join its MoE layers' exchanges and serve their
  /// experts (vLLM's dummy batch of an idle data-parallel rank).
  bool idle = false;

  friend bool operator==(const step_plan&, const step_plan&) = default;
};

/// CAF inspection of step_plan.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_plan& x) {
  return f(caf::meta::type_name("step_plan"), x.step_id, x.tokens, x.positions, x.sequences, x.dropped_seqs,
           x.sample_rows, x.sample_seqs, x.score_rows, x.score_seqs, x.score_positions, x.score_tokens, x.new_requests,
           x.released_requests, x.loras, x.idle);
}

}  // namespace actorllm::proto
