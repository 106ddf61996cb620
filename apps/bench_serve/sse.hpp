// Reading a streamed /v1/completions (or /v1/chat/completions) response: the server-sent-events framing and the
// JSON of each chunk. Pure: bytes in, chunks out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::app::bench {

/// Splits a server-sent-events byte stream, arriving in arbitrary pieces, into the payloads of its "data:" lines.
class sse_reader {
 public:
  /// Appends `bytes`; returns the payloads (text after "data:" and one optional space) of the lines they completed.
  std::vector<std::string> feed(std::string_view bytes);

 private:
  std::string pending_;  // an incomplete last line
};

/// What one chunk of a streamed completion says.
struct completion_chunk {
  bool done = false;                         ///< the "[DONE]" sentinel
  std::string text;                          ///< choices[0].text (delta.content in a chat stream)
  int64_t logprob_tokens = 0;                ///< entries of choices[0].logprobs.token_logprobs
  std::optional<int64_t> prompt_tokens;      ///< usage.prompt_tokens (the usage chunk)
  std::optional<int64_t> completion_tokens;  ///< usage.completion_tokens
  std::string error;                         ///< error.message, when the server reports a failure mid-stream

  /// True when the chunk delivered generated tokens: text, or (for a server without a tokenizer, asked for
  /// logprobs) per-token logprobs with empty text.
  bool carries_tokens() const { return !text.empty() || logprob_tokens > 0; }
};

/// Parses one "data:" payload; throws std::runtime_error when it is neither "[DONE]" nor a JSON object.
completion_chunk parse_completion_chunk(std::string_view payload);

/// The message of an OpenAI-style error body ({"error": {"message": ...}}), else the body itself, shortened.
std::string error_message_of(std::string_view body);

}  // namespace actorllm::app::bench
