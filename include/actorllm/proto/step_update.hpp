// What the scheduler tells the engine after each step: per sequence the token it appended (with logprobs) and
// whether the scheduler finished it (eos, stop token id, max_tokens, max_model_len), with its KV blocks already
// freed. Also how the scheduler reports a failed replica.
#pragma once

#include "actorllm/proto/optional_field.hpp"
#include "actorllm/proto/request_output.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::proto {

/// One sequence's news.
struct seq_update {
  uint64_t request_id = 0;
  uint32_t index = 0;
  std::optional<int32_t> token;  ///< the token appended, if any
  float logprob = 0.0f;
  std::vector<token_logprob> top;
  std::optional<finish_reason> finished;  ///< set when the scheduler finished the sequence
  int32_t num_cached_tokens = 0;          ///< the request's prompt tokens found in the prefix cache at admission

  friend bool operator==(const seq_update&, const seq_update&) = default;
};

/// CAF inspection of seq_update.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, seq_update& x) {
  optional_field token{x.token};
  optional_field finished{x.finished};
  return f(caf::meta::type_name("seq_update"), x.request_id, x.index, token, x.logprob, x.top, finished,
           x.num_cached_tokens);
}

/// Prompt logprobs computed by one step: prompt token position + 1 of request_id.
struct prompt_update {
  uint64_t request_id = 0;
  int32_t position = 0;
  prompt_logprob entry;

  friend bool operator==(const prompt_update&, const prompt_update&) = default;
};

/// CAF inspection of prompt_update.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, prompt_update& x) {
  return f(caf::meta::type_name("prompt_update"), x.request_id, x.position, x.entry);
}

/// The news of one step, in sample order. A non-empty failure means the replica failed: every live request is
/// lost and the engine reports the failure to their submitters.
struct step_update {
  uint64_t step_id = 0;
  std::vector<seq_update> seqs;
  std::vector<prompt_update> prompts;  ///< prompt logprobs, folded in before seqs
  std::string failure;

  friend bool operator==(const step_update&, const step_update&) = default;
};

/// CAF inspection of step_update.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_update& x) {
  return f(caf::meta::type_name("step_update"), x.step_id, x.seqs, x.prompts, x.failure);
}

}  // namespace actorllm::proto
