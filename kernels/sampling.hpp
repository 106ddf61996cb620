// What a backend's batched sampler takes and returns, with vLLM's semantics: per-request settings, the per-sequence
// random generator and its seeds, and the sampled token with its logprobs. Shared by every backend. Plain types, no
// device code: sampling_spec is also what the engine core carries from a request to the sampler shard (the one
// sampling spec from request to kernel), so engine/ may include this header (scripts/check_layers.sh).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

/// Kernel-level sampling types (the public API has its own actorllm::sampling_params).
namespace actorllm::ops {

/// Per-request sampling settings (OpenAI / vLLM names and meanings).
struct sampling_params {
  float temperature = 1.0f;         // 0 (below 1e-5) = greedy
  float top_p = 1.0f;               // (0, 1]
  int32_t top_k = 0;                // <= 0: off
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // prompt + output tokens (HF/vLLM: logit > 0 ? logit / p : logit * p)
  float presence_penalty = 0.0f;    // output tokens only (vLLM semantics)
  float frequency_penalty = 0.0f;   // output tokens only, times the count
  int32_t logprobs = -1;            // -1: none; 0: the sampled token's logprob; n > 0: also the top n
  int32_t prompt_logprobs = -1;     // -1: none; k >= 0: scored prompt positions report the top k too

  // Logits processors (vLLM's allowed_token_ids, bad_words, min_tokens and logit_bias), applied in that order before
  // the penalties; logprobs stay those of the raw logits.
  std::vector<int32_t> allowed_token_ids;       // non-empty: every other token is masked out
  std::vector<std::vector<int32_t>> bad_words;  // a word's last token is masked when the output ends with the rest
  int32_t min_tokens = 0;                       // while the output is shorter, min_tokens_stop_ids are masked out
  std::vector<int32_t> min_tokens_stop_ids;     // eos (unless ignore_eos) and stop_token_ids
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the token's logit

  /// Temperatures below this are greedy (vLLM's _SAMPLING_EPS).
  static constexpr float greedy_below = 1e-5f;
  /// Whether sampling draws from the sequence's generator: once per sampled token unless greedy (or, in the
  /// degenerate case of every logit being -inf after the processors, not at all).
  bool draws_random() const { return temperature >= greedy_below; }

  /// Whether any logits processor acts on a row whose output has `n_output` tokens.
  bool has_logits_processors(size_t n_output) const {
    return !allowed_token_ids.empty() || !bad_words.empty() || !logit_bias.empty() ||
           (!min_tokens_stop_ids.empty() && n_output < static_cast<size_t>(min_tokens));
  }

  friend bool operator==(const sampling_params&, const sampling_params&) = default;
};

/// One request's sampling as the sampler shard applies it: the kernels' settings, used as they are, and what the
/// shard keeps beside them per request (vLLM sends its SamplingParams to the worker the same way). Made from the
/// public actorllm::sampling_params in one place (actors::to_sampling_spec); its CAF inspection is in
/// include/actorllm/proto/sampling_params.hpp.
struct sampling_spec {
  sampling_params params;
  uint64_t seed = 0;  ///< sequence 0 draws from this seed; sequence i > 0 from sequence_seed(seed, i)
  /// Structured outputs: every output must match this pattern (empty: free). The sampler shard builds its token
  /// masks over the vocabulary it was given when it was built.
  std::string structured_pattern;
  /// Structured outputs after a reasoning part: the pattern applies only to the tokens after the first sampled
  /// reasoning_end_token_id (the think-end token); -1: from the first output token (no reasoning part, or the
  /// prompt already ended it).
  int32_t reasoning_end_token_id = -1;
  /// vLLM's logprob_token_ids: each sampled token reports these tokens' raw logprobs (in this order) instead of the
  /// top params.logprobs; empty: the top params.logprobs.
  std::vector<int32_t> logprob_token_ids;

  friend bool operator==(const sampling_spec&, const sampling_spec&) = default;
};

/// A token and its log-probability.
struct token_logprob {
  int32_t token;
  float logprob;
};

/// What sample() picked. `logprob` is always filled (it costs one pass); `top` holds min(logprobs, n_vocab)
/// entries when params.logprobs > 0, sorted by logprob descending, ties by lower token id first.
struct sample_result {
  int32_t token;
  float logprob;
  std::vector<token_logprob> top;
};

/// A token's place in one row of raw logits: its log-softmax (computed in double), its rank (1 + the number of
/// tokens with a larger logit) and the top k tokens, as sample_result::top orders them.
struct row_logprobs {
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<token_logprob> top;
};

/// The `k` highest of `x` (n NaN-free logits whose max is m and log(sum(exp(x - m))) is ls) as (token, logprob), best
/// first, ties by the lower id: sample_result::top of every backend and the prompt scores. All -inf (m = -inf):
/// each -log(n).
std::vector<token_logprob> top_logprobs(const float* x, int64_t n, int64_t k, float m, float ls);

/// The logprobs of `token` in `logits` (one row, the whole vocabulary) and the top min(k, size) tokens, with the
/// sampler's conventions (NaN is -inf, +inf the largest finite value; top entries as sample() picks them).
row_logprobs logprobs_of(std::span<const float> logits, int32_t token, int32_t k);

/// The logprobs of `tokens`, in their order, in `logits` (one row, the whole vocabulary, raw: before any processor),
/// with logprobs_of's conventions: vLLM's logprob_token_ids. Every id must be in [0, logits.size()).
std::vector<token_logprob> logprobs_of_tokens(std::span<const float> logits, std::span<const int32_t> tokens);

/// Per-request random generator: xoshiro256** seeded through splitmix64. Its output depends only on the seed, on
/// every platform (unlike std::uniform_*_distribution, whose algorithm is implementation-defined).
class sampler_rng {
 public:
  explicit sampler_rng(uint64_t seed);
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();
  /// The next 64 random bits.
  uint64_t next();
  /// Same state: the same draws from here on. Compares without drawing (a check that draws moves the generator).
  friend bool operator==(const sampler_rng&, const sampler_rng&) = default;

 private:
  uint64_t s_[4];
};

/// The seed sequence `index` of a request seeded with `seed` draws from: the seed itself for sequence 0 (so n = 1
/// requests reproduce a plain sampler_rng{seed} run), a splitmix64 mix of both for the others.
uint64_t sequence_seed(uint64_t seed, uint32_t index);

/// The seed of a request that brought none: derived from the engine seed and the request id, so a run is
/// reproducible for the same submissions.
uint64_t default_request_seed(uint64_t engine_seed, uint64_t request_id);

/// One row of a batched sample: the row's settings, the ids the penalties look at, and the sequence's generator.
/// Everything is borrowed for the duration of the call; `rng` advances.
struct sample_row {
  const sampling_params* params = nullptr;
  std::span<const int32_t> prompt_ids;
  std::span<const int32_t> output_ids;
  sampler_rng* rng = nullptr;
  /// Structured outputs: a bit per token id (bit t of word t / 64), 1 where the token is allowed; null: all.
  const uint64_t* allowed_mask = nullptr;
};

}  // namespace actorllm::ops
