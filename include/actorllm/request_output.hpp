// What a request produces: token deltas while it runs (streaming) and one final output with ids, text, finish
// reason, logprobs and usage (vLLM's RequestOutput / CompletionOutput).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm {

/// Why a sequence stopped, as OpenAI's finish_reason spells it.
enum class finish_reason : uint8_t {
  stop,    ///< an eos token, a stop token id or a stop string
  length,  ///< max_tokens, or max_model_len tokens in all
  abort,   ///< aborted by the caller or by shutdown
};

/// "stop", "length" or "abort".
constexpr std::string_view to_string(finish_reason reason) {
  switch (reason) {
    case finish_reason::stop:
      return "stop";
    case finish_reason::length:
      return "length";
    case finish_reason::abort:
      return "abort";
  }
  return "unknown";
}

/// A token and its log-probability.
struct token_logprob {
  int32_t token = 0;
  float logprob = 0.0f;

  friend bool operator==(const token_logprob&, const token_logprob&) = default;
};

/// The logprobs of one generated token: its own, and the most likely alternatives when asked for.
struct sample_logprobs {
  int32_t token = 0;     ///< the generated token
  float logprob = 0.0f;  ///< its log-probability (raw model distribution, vLLM's default)
  /// The top `sampling_params::logprobs` tokens, most likely first; with sampling_params::logprob_token_ids,
  /// those tokens in the order given.
  std::vector<token_logprob> top;

  friend bool operator==(const sample_logprobs&, const sample_logprobs&) = default;
};

/// The logprob of one prompt token given the tokens before it (vLLM's prompt_logprobs entry).
struct prompt_logprob {
  int32_t token = 0;               ///< the prompt token
  float logprob = 0.0f;            ///< its log-probability (raw model distribution)
  int32_t rank = 0;                ///< 1 + the number of tokens more likely than it
  std::vector<token_logprob> top;  ///< the top `sampling_params::prompt_logprobs` tokens, most likely first

  friend bool operator==(const prompt_logprob&, const prompt_logprob&) = default;
};

/// One output sequence of a request.
struct completion_output {
  uint32_t index = 0;              ///< which of the request's n sequences
  std::vector<int32_t> token_ids;  ///< generated ids (an eos or stop token that ended it included)
  std::string text;                ///< generated text (stop string excluded unless include_stop_str_in_output)
  std::optional<actorllm::finish_reason> finish_reason;  ///< set once the sequence is done
  std::optional<std::string> stop_string;                ///< the stop string that ended it
  std::optional<int32_t> stop_token_id;                  ///< the stop_token_ids entry that ended it
  std::vector<sample_logprobs> logprobs;                 ///< per token, when sampling_params::logprobs is set
  double cumulative_logprob = 0.0;                       ///< sum of the tokens' logprobs

  friend bool operator==(const completion_output&, const completion_output&) = default;
};

/// Token counts of a request (OpenAI's usage).
struct usage_info {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  ///< over all n sequences
  /// Prompt tokens whose KV came from the prefix cache (OpenAI's usage.prompt_tokens_details.cached_tokens).
  int32_t cached_tokens = 0;

  int32_t total_tokens() const { return prompt_tokens + completion_tokens; }
  friend bool operator==(const usage_info&, const usage_info&) = default;
};

/// The result of one request.
struct request_output {
  uint64_t request_id = 0;
  std::string prompt;                      ///< the prompt text, when it was given as text
  std::vector<int32_t> prompt_token_ids;   ///< the prompt as the model saw it
  std::vector<completion_output> outputs;  ///< one per sequence, by index
  /// With sampling_params::prompt_logprobs: entry i is prompt token i + 1's (the first prompt token has none, as
  /// vLLM's leading null); empty otherwise.
  std::vector<prompt_logprob> prompt_logprobs;
  bool finished = false;  ///< every sequence is done
  usage_info usage;

  friend bool operator==(const request_output&, const request_output&) = default;
};

/// What one step added to one sequence of a streaming request.
struct stream_delta {
  uint64_t request_id = 0;
  uint32_t index = 0;                                    ///< which of the request's n sequences
  std::vector<int32_t> token_ids;                        ///< the new token(s)
  std::string text;                                      ///< the text they made final (may be empty mid-character)
  std::vector<sample_logprobs> logprobs;                 ///< per new token, when asked for
  std::optional<actorllm::finish_reason> finish_reason;  ///< set on the sequence's last delta

  friend bool operator==(const stream_delta&, const stream_delta&) = default;
};

}  // namespace actorllm
