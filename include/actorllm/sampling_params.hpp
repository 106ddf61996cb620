// Per-request generation settings with vLLM's names, defaults and meanings.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actorllm {

/// How to sample and when to stop (vLLM's SamplingParams).
struct sampling_params {
  int32_t n = 1;                           ///< output sequences per prompt (they share the prompt's KV blocks)
  float temperature = 1.0f;                ///< 0: greedy
  float top_p = 1.0f;                      ///< nucleus mass, in (0, 1]
  int32_t top_k = 0;                       ///< keep the k most likely tokens; 0 or -1: all
  float min_p = 0.0f;                      ///< drop tokens below min_p times the top probability, in [0, 1]
  float presence_penalty = 0.0f;           ///< in [-2, 2], on tokens present in the output
  float frequency_penalty = 0.0f;          ///< in [-2, 2], per occurrence in the output
  float repetition_penalty = 1.0f;         ///< > 0, on tokens in the prompt and the output (1: off)
  std::optional<uint64_t> seed;            ///< per-request seed; unset: derived from the engine seed and the request id
  std::optional<int32_t> max_tokens = 16;  ///< output tokens per sequence; unset: up to max_model_len
  int32_t min_tokens = 0;                  ///< no eos / stop-token finish before this many output tokens
  std::vector<std::string> stop;           ///< stop strings; the output text ends before the first one found
  std::vector<int32_t> stop_token_ids;     ///< token ids that end a sequence (kept in its token ids)
  bool include_stop_str_in_output = false;  ///< keep the matched stop string in the text
  bool ignore_eos = false;                  ///< generate through end-of-sequence tokens
  std::optional<int32_t> logprobs;          ///< per output token: its logprob, plus the top `logprobs` (0: just it)
  /// vLLM's logprob_token_ids: per output token, the logprobs of these tokens (in this order) instead of the top
  /// `logprobs`; needs `logprobs` set. Empty: the top `logprobs`.
  std::vector<int32_t> logprob_token_ids;
  /// Per prompt token after the first: its logprob given the tokens before it, its rank, plus the top
  /// `prompt_logprobs` tokens at that position (0: just it). Computed in the prompt's prefill; such a request does
  /// not read the prefix cache (every prompt position must go through the model).
  std::optional<int32_t> prompt_logprobs;
  bool skip_special_tokens = true;                    ///< leave special tokens out of the text
  std::vector<std::pair<int32_t, float>> logit_bias;  ///< (token id, bias in [-100, 100]) added to the logits
  std::vector<int32_t> allowed_token_ids;             ///< non-empty: only these tokens can be sampled
  /// Words never generated: a word's last token is banned once the output ends with its other tokens (each word
  /// tokenized as is and with a leading space, as vLLM does).
  std::vector<std::string> bad_words;
  /// Structured outputs: every output must match this pattern (text/structured/byte_dfa.hpp's syntax; JSON
  /// schemas and choices are turned into one by text/structured/json_schema.hpp). Empty: unconstrained.
  std::string structured_pattern;
  /// Structured outputs after a reasoning part (vLLM with a reasoning parser): the pattern applies only to the output
  /// tokens after the first `reasoning_end_token_id` (the think-end token, e.g. </think>), or from the first output
  /// token when the prompt already ended the reasoning (that token after the last `reasoning_start_token_id` in the
  /// prompt). -1: the pattern applies from the first output token.
  int32_t reasoning_end_token_id = -1;
  int32_t reasoning_start_token_id = -1;  ///< the think-start token (e.g. <think>); -1: none

  friend bool operator==(const sampling_params&, const sampling_params&) = default;
};

/// Empty when `p` is usable; otherwise which field is not and why (vLLM's ranges).
inline std::string validate(const sampling_params& p) {
  auto num = [](double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.')
      s.pop_back();
    return s;
  };
  if (p.n < 1)
    return "n must be at least 1, got " + std::to_string(p.n);
  if (!(p.temperature >= 0) || std::isinf(p.temperature))
    return "temperature must be a finite number >= 0, got " + num(p.temperature);
  if (!(p.top_p > 0 && p.top_p <= 1))
    return "top_p must be in (0, 1], got " + num(p.top_p);
  if (p.top_k < -1)
    return "top_k must be -1 or 0 (off) or at least 1, got " + std::to_string(p.top_k);
  if (!(p.min_p >= 0 && p.min_p <= 1))
    return "min_p must be in [0, 1], got " + num(p.min_p);
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    return "presence_penalty must be in [-2, 2], got " + num(p.presence_penalty);
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    return "frequency_penalty must be in [-2, 2], got " + num(p.frequency_penalty);
  if (!(p.repetition_penalty > 0) || std::isinf(p.repetition_penalty))
    return "repetition_penalty must be a finite number > 0, got " + num(p.repetition_penalty);
  if (p.max_tokens && *p.max_tokens < 1)
    return "max_tokens must be at least 1, got " + std::to_string(*p.max_tokens);
  if (p.min_tokens < 0)
    return "min_tokens must be at least 0, got " + std::to_string(p.min_tokens);
  if (p.max_tokens && p.min_tokens > *p.max_tokens)
    return "min_tokens (" + std::to_string(p.min_tokens) + ") must not exceed max_tokens (" +
           std::to_string(*p.max_tokens) + ")";
  if (p.logprobs && *p.logprobs < 0)
    return "logprobs must be at least 0, got " + std::to_string(*p.logprobs);
  for (int32_t id : p.logprob_token_ids)
    if (id < 0)
      return "logprob_token_ids must be token ids (>= 0), got " + std::to_string(id);
  if (!p.logprob_token_ids.empty() && !p.logprobs)
    return "logprob_token_ids needs logprobs to be set (the token ids replace its top logprobs)";
  if (p.prompt_logprobs && *p.prompt_logprobs < 0)
    return "prompt_logprobs must be at least 0, got " + std::to_string(*p.prompt_logprobs);
  for (const auto& s : p.stop)
    if (s.empty())
      return "stop strings must not be empty";
  for (int32_t id : p.stop_token_ids)
    if (id < 0)
      return "stop_token_ids must be token ids (>= 0), got " + std::to_string(id);
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0)
      return "logit_bias keys must be token ids (>= 0), got " + std::to_string(id);
    if (!(bias >= -100 && bias <= 100))
      return "logit_bias values must be in [-100, 100], got " + num(bias) + " for token " + std::to_string(id);
  }
  for (int32_t id : p.allowed_token_ids)
    if (id < 0)
      return "allowed_token_ids must be token ids (>= 0), got " + std::to_string(id);
  for (const auto& w : p.bad_words)
    if (w.empty())
      return "bad_words must not hold empty strings";
  if (p.reasoning_end_token_id < -1 || p.reasoning_start_token_id < -1)
    return "reasoning_end_token_id and reasoning_start_token_id must be token ids (>= 0) or -1 (none)";
  return {};
}

}  // namespace actorllm
