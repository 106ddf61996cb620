// The errors of the engine core (block allocator, scheduler) as values: the actor wrappers turn them into
// caf::error and the HTTP layer into OpenAI-shaped error bodies, so each carries a code to branch on and a message
// that names the numbers involved.
#pragma once

#include <string>
#include <string_view>

namespace actorllm::engine {

/// What went wrong, coarse enough for a caller to branch on (HTTP 400 vs. 500, retry or not).
enum class engine_errc {
  invalid_argument,       ///< a malformed request or config (empty prompt, n < 1, min_tokens > max_tokens, ...)
  duplicate_request,      ///< a request id that is still live
  unknown_request,        ///< a request id the scheduler does not hold (finished, aborted or never added)
  exceeds_max_model_len,  ///< prompt + max_tokens longer than the model's context
  exceeds_kv_cache,       ///< a sequence that could not fit even in an empty KV cache
  too_many_sequences,     ///< a request with more output sequences than max_num_seqs
  unknown_sequence,       ///< a sequence id that holds no blocks / is not live (includes a double free)
  sequence_exists,        ///< starting a block table for a sequence id that already holds one
  out_of_blocks,          ///< not enough free blocks for an allocation (the caller may preempt and retry)
  unknown_step,           ///< a result for a step that is not in flight
  result_mismatch,        ///< a step result whose shape does not match its plan
};

/// Stable lowercase name of a code, for logs and error bodies.
constexpr std::string_view to_string(engine_errc code) {
  switch (code) {
    case engine_errc::invalid_argument:
      return "invalid_argument";
    case engine_errc::duplicate_request:
      return "duplicate_request";
    case engine_errc::unknown_request:
      return "unknown_request";
    case engine_errc::exceeds_max_model_len:
      return "exceeds_max_model_len";
    case engine_errc::exceeds_kv_cache:
      return "exceeds_kv_cache";
    case engine_errc::too_many_sequences:
      return "too_many_sequences";
    case engine_errc::unknown_sequence:
      return "unknown_sequence";
    case engine_errc::sequence_exists:
      return "sequence_exists";
    case engine_errc::out_of_blocks:
      return "out_of_blocks";
    case engine_errc::unknown_step:
      return "unknown_step";
    case engine_errc::result_mismatch:
      return "result_mismatch";
  }
  return "unknown";
}

/// An error value: a code plus a human-readable message that names the offending values.
struct engine_error {
  engine_errc code = engine_errc::invalid_argument;
  std::string message;
};

}  // namespace actorllm::engine
