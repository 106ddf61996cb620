// Token sampling from logits with vLLM's semantics: penalties, temperature, min-p, top-k, top-p, and raw
// logprobs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace actorllm::cpu {

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

/// Per-request random generator: xoshiro256** seeded through splitmix64. Its output depends only on the seed, on
/// every platform (unlike std::uniform_*_distribution, whose algorithm is implementation-defined).
class sampler_rng {
 public:
  explicit sampler_rng(uint64_t seed);
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();
  /// The next 64 random bits.
  uint64_t next();

 private:
  uint64_t s_[4];
};

/// Applies the penalties of `params` to `logits` in place, as vLLM does: repetition_penalty to every token that
/// occurs in prompt_ids or output_ids (logit > 0 ? logit / p : logit * p), then frequency_penalty * count and
/// presence_penalty to every token that occurs in output_ids. Out-of-range ids are ignored.
void apply_penalties(float* logits, int64_t n_vocab, const sampling_params& params, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids);

/// The tokens sample() can draw for `logits` taken as already penalised: for temperature 0 the argmax, else the
/// survivors of min_p, top_k and top_p in ascending id order. For tests, debugging and explaining a choice.
std::vector<int32_t> sampling_support(const float* logits, int64_t n_vocab, const sampling_params& params);

/// Samples one token from `logits` (n_vocab entries; modified, used as scratch). Order as vLLM's sampler:
/// repetition/frequency/presence penalties -> temperature (below 1e-5: argmax of the penalised logits, ties to
/// the lowest id, no random draw) -> min_p, top_k, top_p (each keeps ties at its threshold, top_p always keeps the
/// most likely token) -> one draw of rng.uniform() over the survivors in token-id order. Logprobs are taken from
/// log_softmax of the raw logits (before penalties and temperature, vLLM's default). NaN logits are treated as
/// -inf and +inf as the largest finite float, so results are NaN-free; if every logit is -inf the token is 0 with
/// logprob -log(n_vocab). Token ids outside [0, n_vocab) in prompt_ids/output_ids are ignored.
sample_result sample(float* logits, int64_t n_vocab, const sampling_params& params, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids, sampler_rng& rng);

}  // namespace actorllm::cpu
