// Token sampling from logits with vLLM's semantics: penalties, temperature, min-p, top-k, top-p, and raw
// logprobs.
#pragma once

#include "kernels/sampling.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace actorllm::cpu {

// The sampling types are backend-neutral (kernels/sampling.hpp); the CPU functions below keep their cpu:: names.
using ops::sample_result;
using ops::sample_row;
using ops::sampler_rng;
using ops::sampling_params;
using ops::token_logprob;

/// Applies the penalties of `params` to `logits` in place, as vLLM does: repetition_penalty to every token that
/// occurs in prompt_ids or output_ids (logit > 0 ? logit / p : logit * p), then frequency_penalty * count and
/// presence_penalty to every token that occurs in output_ids. Out-of-range ids are ignored.
void apply_penalties(float* logits, int64_t n_vocab, const sampling_params& params, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids);

/// Applies the logits processors of `params` in place, in vLLM's order: allowed_token_ids (others to -inf),
/// bad_words (a word's last token to -inf when output_ids ends with the word's other tokens), min_tokens (the stop
/// ids to -inf while output_ids is shorter), logit_bias (added). Out-of-range ids are ignored.
void apply_logits_processors(float* logits, int64_t n_vocab, const sampling_params& params,
                             std::span<const int32_t> output_ids);

/// The tokens sample() can draw for `logits` taken as already penalised: for temperature 0 the argmax, else the
/// survivors of min_p, top_k and top_p in ascending id order. For tests, debugging and explaining a choice.
std::vector<int32_t> sampling_support(const float* logits, int64_t n_vocab, const sampling_params& params);

/// Samples one token from `logits` (n_vocab entries; modified, used as scratch). Order as vLLM's sampler:
/// logits processors (apply_logits_processors) -> repetition/frequency/presence penalties -> temperature (below 1e-5:
/// argmax of the penalised logits, ties to the lowest id, no random draw) -> min_p, top_k, top_p (min_p and top_k keep
/// ties at their threshold; top_p keeps the shortest prefix in rank order, ties by the lower id first, whose mass
/// reaches top_p, and always the most likely token) -> one draw of rng.uniform() over the survivors in token-id
/// order. Logprobs are taken from log_softmax of the raw logits (before penalties and temperature, vLLM's default). NaN
/// logits are treated as -inf and +inf as the largest finite float, so results are NaN-free; if every logit is -inf the
/// token is 0 with logprob -log(n_vocab). Token ids outside [0, n_vocab) in prompt_ids/output_ids are ignored.
/// `allowed_mask` (structured outputs): a bit per token, 1 where allowed; the others are masked out first, like
/// allowed_token_ids. Null: no mask.
sample_result sample(float* logits, int64_t n_vocab, const sampling_params& params, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids, sampler_rng& rng, const uint64_t* allowed_mask = nullptr);

}  // namespace actorllm::cpu
