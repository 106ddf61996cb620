// The engine's per-request bookkeeping as a plain class (vLLM's OutputProcessor): validates and tokenizes what
// front ends submit, then turns each step's tokens into text deltas (incremental detokenization), applies stop
// strings, and assembles the final outputs. The engine actor is a thin shell around it.
#pragma once

#include "actorllm/proto/request_spec.hpp"
#include "actorllm/proto/step_update.hpp"
#include "actorllm/proto/submit_request.hpp"
#include "actorllm/request_output.hpp"
#include "engine/expected.hpp"
#include "kernels/sampling.hpp"
#include "text/incremental_detokenizer.hpp"
#include "text/stop_string_matcher.hpp"
#include "text/tokenizer.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace actorllm::actors {

/// What requests are checked against.
struct model_limits {
  int64_t n_vocab = 0;
  int32_t max_model_len = 0;
  std::vector<int32_t> eos_token_ids;
  uint64_t seed = 0;  ///< the engine seed, from which requests without a seed get theirs (ops::default_request_seed)
};

/// The one conversion of a request's public sampling parameters into the spec the sampler shard applies
/// (kernels/sampling.hpp), after validate(): the kernels' settings, the seed (`request_id`'s default seed when the
/// request brought none), the structured pattern with where it starts (after the reasoning part, unless `prompt_ids`
/// already ended it), the min_tokens stop ids (eos unless ignore_eos, and stop_token_ids), bad words tokenized with
/// `tok` and logprob_token_ids. An error (invalid_argument) when the request needs a tokenizer (`tok` null) or names
/// reasoning tokens outside the vocabulary.
engine::expected<ops::sampling_spec> to_sampling_spec(const sampling_params& params, const model_limits& limits,
                                                      const text::tokenizer* tok, uint64_t request_id,
                                                      std::span<const int32_t> prompt_ids);

/// Tracks the engine's live requests from submission to final output.
class output_processor {
 public:
  /// `tok` is the model's tokenizer (nullopt: token-id prompts only, and no text in the outputs).
  output_processor(std::optional<text::tokenizer> tok, model_limits limits);

  /// Validates and tokenizes a submission, starts tracking it, and returns what the scheduler needs. Errors
  /// (invalid_argument, exceeds_max_model_len, duplicate_request) name the offending values; nothing is tracked then.
  engine::expected<proto::request_spec> add(const proto::submit_request& req);

  /// Stops tracking a request without producing an output (the scheduler refused it).
  void forget(uint64_t request_id) { requests_.erase(request_id); }

  /// What one step produced.
  struct step_outputs {
    std::vector<stream_delta> deltas;      ///< of streaming requests, in update order
    std::vector<request_output> finished;  ///< requests now complete, no longer tracked
    std::vector<proto::seq_ref> stopped;   ///< sequences that hit a stop string: the scheduler must finish them
  };

  /// Folds one step's news in. Updates for requests or sequences no longer live are ignored (they were computed
  /// before an abort or a stop string reached the scheduler).
  void process(const proto::step_update& update, step_outputs& out);

  /// Finishes every unfinished sequence of a request with `abort` and returns its final output; nullopt when the
  /// request is not tracked.
  std::optional<request_output> abort(uint64_t request_id);

  /// Whether a request is tracked.
  bool contains(uint64_t request_id) const { return requests_.contains(request_id); }
  /// Whether a tracked request asked for deltas.
  bool streams(uint64_t request_id) const;
  /// Tracked requests.
  size_t size() const { return requests_.size(); }
  /// Ids of every tracked request.
  std::vector<uint64_t> request_ids() const;
  /// The tokenizer, if any.
  const std::optional<text::tokenizer>& tokenizer() const { return tok_; }

 private:
  struct seq_state {
    completion_output out;
    std::optional<text::incremental_detokenizer> detok;
    std::optional<text::stop_string_matcher> matcher;
  };
  struct request_state {
    uint64_t id = 0;
    std::string prompt_text;
    std::vector<int32_t> prompt_ids;
    sampling_params params;
    bool stream = false;
    std::vector<seq_state> seqs;
    int32_t n_unfinished = 0;
    int32_t num_cached_tokens = 0;  ///< prompt tokens the prefix cache held, as the scheduler reported
    std::vector<prompt_logprob>
        prompt_logprobs;  ///< with sampling_params::prompt_logprobs: per prompt token after the first
  };

  /// Finishes `seq` (if not yet) with `reason`, flushing held-back text into `text`.
  void finish(request_state& req, seq_state& seq, finish_reason reason, std::string& text);
  request_output final_output(request_state& req) const;

  std::optional<text::tokenizer> tok_;
  model_limits limits_;
  std::unordered_map<uint64_t, request_state> requests_;
};

}  // namespace actorllm::actors
