// The sampler shard's per-sequence state: each sequence has its own random generator and the list of tokens it
// generated (for the presence/frequency penalties), created from its request's sampler_setup and kept across
// preemptions, so a sequence samples the same tokens however it was batched, preempted or recomputed.
#pragma once

#include "engine/step_plan.hpp"
#include "kernels/backend.hpp"
#include "kernels/sampling.hpp"
#include "runner/step_result.hpp"
#include "text/structured/token_constraint.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace actorllm::runner {

/// Whether `ids` end a reasoning part, as vLLM's reasoners decide it: `end_token` occurs after the last `start_token`
/// (-1: none). False without `end_token`.
bool reasoning_ended(std::span<const int32_t> ids, int32_t start_token, int32_t end_token);

/// Sampler state of every request the sampler shard has seen and not released.
class sequence_samplers {
 public:
  /// `tokenizer`: the directory of the engine's tokenizer (absolute), whose vocabulary structured outputs' token masks
  /// are built over; the shard learns it once, from its assignment. Empty: requests with a structured pattern fail.
  explicit sequence_samplers(std::string tokenizer = {}) : tokenizer_(std::move(tokenizer)) {}

  /// Applies a plan's bookkeeping: drops released requests' state, then creates new requests' (their sampling spec
  /// as it is: settings, seed, pattern, reasoning end and listed logprob tokens).
  void apply(const engine::step_plan& plan);

  /// Creates (or replaces) the state of one request: its settings, its seed and the prompt ids the repetition
  /// penalty reads.
  void add(uint64_t request_id, const ops::sampling_params& params, uint64_t seed, std::vector<int32_t> prompt_ids);
  /// Constrains a request added before to structured outputs matching `pattern` (token masks over the vocabulary of
  /// the tokenizer this sampler was built with; compiled once per process and pattern, within structured_limits'
  /// defaults when this process has not compiled it already).
  void constrain(uint64_t request_id, const std::string& pattern);
  /// Makes a constrained request's constraint start only after a reasoning part: each sequence samples freely until
  /// it samples `end_token` (the think-end token), then the constraint applies to the tokens after it (vLLM's
  /// structured outputs with a reasoning parser). Before the request's first sampling or resume().
  void constrain_after(uint64_t request_id, int32_t end_token);

  /// Makes a request added before report, for each sampled token, the raw logprobs of `token_ids` (in this order)
  /// instead of its top logprobs (vLLM's logprob_token_ids). Each id must be inside the logits' vocabulary.
  void report_token_logprobs(uint64_t request_id, std::vector<int32_t> token_ids);

  /// Failover: starts sequence 0 of a request added (and constrained) before as if it had already sampled
  /// `output_ids` here: penalties see them, its generator has advanced once per token, its structured-output
  /// automaton has consumed them (those after the reasoning's end, for a constraint that starts there).
  void resume(uint64_t request_id, std::span<const int32_t> output_ids);

  /// Drops the state of `request_ids` (unknown ids are ignored: a request may end before it was ever sampled).
  void release(std::span<const uint64_t> request_ids);

  /// Samples plan.sample_seqs[i] from row i of `logits` (f32 [n_rows, n_vocab] on `be`, used as scratch), the whole
  /// batch in one backend call with per-row settings. A sample row of a request with no state is a protocol error,
  /// returned as step_result::error.
  /// Then rows n_rows .. n_rows + plan.score_rows.size() - 1 of `logits` are the score rows: each gives the logprob
  /// and rank of its prompt token and the request's top prompt_logprobs (step_result::prompt_scores).
  step_result sample(const engine::step_plan& plan, backend& be, const tensor& logits);

  /// Requests with state.
  size_t n_requests() const { return requests_.size(); }
  /// Output tokens recorded for one sequence (empty when unknown); for tests.
  std::span<const int32_t> outputs(engine::seq_id seq) const;

 private:
  struct sequence {
    ops::sampler_rng rng;
    std::vector<int32_t> output_ids;
    int32_t constraint_state = 0;  ///< structured outputs: the automaton state after output_ids
    /// Structured outputs: whether the constraint applies (false while a reasoning part it waits for goes on).
    bool constrained = true;
  };
  struct request {
    ops::sampling_params params;
    uint64_t seed = 0;
    std::vector<int32_t> prompt_ids;
    std::unordered_map<uint32_t, sequence> seqs;
    /// Structured outputs: the compiled pattern (shared, cached per process); null: free.
    std::shared_ptr<const text::structured::token_constraint> constraint;
    std::string constraint_error;            ///< why the pattern could not be compiled here (sampling then fails)
    std::vector<int32_t> logprob_token_ids;  ///< non-empty: reported instead of the top logprobs
    int32_t reasoning_end_token = -1;        ///< >= 0: the constraint starts after this token (constrain_after)
  };

  /// A new sequence of `req`, generating from `seed`.
  static sequence new_sequence(const request& req, uint64_t seed);
  /// Records `token` as sampled by `s` (of `req`): its output, and its constraint's state.
  static void record(const request& req, sequence& s, int32_t token);

  /// The score rows' logprobs (downloaded: they are few, and a prompt's worth of rows once per request).
  std::string score(const engine::step_plan& plan, backend& be, const tensor& logits, std::vector<prompt_score>& out);
  /// logprob_token_ids: the listed tokens' raw logprobs of each sample row whose request has them (into
  /// token_logprobs_), read before sampling overwrites the logits. Only such rows are downloaded.
  std::string listed_token_logprobs(const engine::step_plan& plan, backend& be, const tensor& logits);

  std::string tokenizer_;  ///< the tokenizer directory structured outputs' token masks come from (empty: none)
  std::unordered_map<uint64_t, request> requests_;
  std::vector<float> score_host_;      // the score rows' logits on the host
  std::vector<ops::sample_row> rows_;  // per-step scratch
  std::vector<sequence*> row_seqs_;    // the sequence of each row
  std::vector<ops::sample_result> results_;
  std::vector<float> row_host_;                                  // one sample row's logits on the host
  std::vector<std::vector<ops::token_logprob>> token_logprobs_;  // per row: logprob_token_ids' logprobs
  std::vector<std::vector<uint64_t>> padded_masks_;              // per row: a mask widened to the logits' vocabulary
};

}  // namespace actorllm::runner
