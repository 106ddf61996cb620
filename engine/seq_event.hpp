// What happened to one sequence in a scheduler call: a token appended, the sequence finished, or both.
#pragma once

#include "engine/seq_id.hpp"

#include <cstdint>
#include <optional>
#include <string_view>

namespace actorllm::engine {

/// Why a sequence stopped, as OpenAI's finish_reason spells it.
enum class finish_reason {
  stop,    ///< an eos or stop token id (or a stop string, found by the engine's detokenizer)
  length,  ///< max_tokens output tokens, or max_model_len tokens in all
  abort,   ///< the caller gave up (client disconnect, explicit abort, shutdown)
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

/// One sequence's news from update_from_output, finish or abort. A finished sequence has already released its KV
/// blocks when the caller sees this.
struct seq_event {
  seq_id seq;
  std::optional<int32_t> new_token;       ///< the token appended to the sequence's output, if any
  std::optional<finish_reason> finished;  ///< set when the sequence is done
  bool request_finished = false;          ///< this was the last unfinished sequence of its request: the request is gone
  /// Prompt tokens of the request found in the prefix cache when it was first admitted (0 before that, or with
  /// caching off): usage.prompt_tokens_details.cached_tokens.
  int32_t n_cached_tokens = 0;
  /// update_from_output's events: the index of the plan's sample row (step_plan::sample_seqs, and the result's
  /// token) this event's token came from; -1 for a sequence finished by finish_sequence or finish_request.
  int32_t sample_row = -1;
};

}  // namespace actorllm::engine
