// What the scheduler tells the engine after each step: per sequence the token it appended (with logprobs) and
// whether the scheduler finished it (eos, stop token id, max_tokens, max_model_len), with its KV blocks already
// freed. Also how the scheduler reports a failed replica, and how it makes a step's news from the sampler shard's
// result and the scheduler core's events.
#pragma once

#include "actorllm/proto/optional_field.hpp"
#include "actorllm/proto/request_output.hpp"
#include "actorllm/proto/step_result.hpp"
#include "engine/seq_event.hpp"
#include "util/check.hpp"

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

/// The public finish reason of the scheduler core's.
inline finish_reason to_public(engine::finish_reason reason) {
  switch (reason) {
    case engine::finish_reason::stop:
      return finish_reason::stop;
    case engine::finish_reason::length:
      return finish_reason::length;
    case engine::finish_reason::abort:
      return finish_reason::abort;
  }
  return finish_reason::abort;
}

/// Step `result.step_id`'s news: the result's prompt scores (the engine ignores those of requests that ended
/// meanwhile), then one seq_update per event of scheduler_core::update_from_output with the token its sample row
/// drew. Moves the logprobs out of `result`.
inline step_update make_step_update(step_result& result, const std::vector<engine::seq_event>& events) {
  step_update upd;
  upd.step_id = result.step_id;
  upd.prompts.reserve(result.prompt_scores.size());
  for (auto& s : result.prompt_scores)
    upd.prompts.push_back({s.seq.request_id, s.position, {s.token, s.logprob, s.rank, std::move(s.top)}});
  upd.seqs.reserve(events.size());
  for (const auto& e : events) {
    ACTORLLM_CHECK(e.sample_row >= 0 && static_cast<size_t>(e.sample_row) < result.tokens.size(),
                   "a step event for a row the step did not sample");
    sampled_token& tok = result.tokens[static_cast<size_t>(e.sample_row)];
    seq_update u;
    u.request_id = e.seq.request_id;
    u.index = e.seq.index;
    u.token = e.new_token;
    u.logprob = tok.logprob;
    u.top = std::move(tok.top);
    u.num_cached_tokens = e.n_cached_tokens;
    if (e.finished)
      u.finished = to_public(*e.finished);
    upd.seqs.push_back(std::move(u));
  }
  return upd;
}

}  // namespace actorllm::proto
