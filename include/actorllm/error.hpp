// The one exception type of the embedding API and the error codes that travel between actors: a code to branch on
// plus a message that names the numbers involved.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace actorllm {

/// What went wrong, coarse enough for a caller to branch on (a bad request vs. a broken engine).
enum class errc : uint8_t {
  invalid_argument = 1,   ///< a malformed request: bad sampling parameters, empty prompt, unknown token ids
  invalid_config,         ///< an engine config the model or the machine cannot run (tp, pp, partition, cache size)
  load_failed,            ///< model or tokenizer files that cannot be read or do not describe a servable model
  duplicate_request,      ///< a request id that is still live
  unknown_request,        ///< a request id the engine does not hold
  exceeds_max_model_len,  ///< prompt + max_tokens longer than the context
  exceeds_kv_cache,       ///< a sequence that cannot fit even in an empty KV cache
  too_many_sequences,     ///< n larger than max_num_seqs
  engine_failure,         ///< a shard failed: the replica is unhealthy and serves no more requests
  shut_down,              ///< the engine stopped before the request finished
  internal,               ///< a protocol violation between actors (a bug)
};

/// Stable lowercase name of a code.
constexpr std::string_view to_string(errc code) {
  switch (code) {
    case errc::invalid_argument:
      return "invalid_argument";
    case errc::invalid_config:
      return "invalid_config";
    case errc::load_failed:
      return "load_failed";
    case errc::duplicate_request:
      return "duplicate_request";
    case errc::unknown_request:
      return "unknown_request";
    case errc::exceeds_max_model_len:
      return "exceeds_max_model_len";
    case errc::exceeds_kv_cache:
      return "exceeds_kv_cache";
    case errc::too_many_sequences:
      return "too_many_sequences";
    case errc::engine_failure:
      return "engine_failure";
    case errc::shut_down:
      return "shut_down";
    case errc::internal:
      return "internal";
  }
  return "unknown";
}

/// Thrown by the embedding API (actorllm::LLM and its streams); what() is the message alone.
class error : public std::runtime_error {
 public:
  /// An error with `code` and a message naming the offending values.
  error(errc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  /// The code to branch on.
  errc code() const noexcept { return code_; }

 private:
  errc code_;
};

}  // namespace actorllm
