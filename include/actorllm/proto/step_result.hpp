// CAF inspection of the sampler shard's step result (runner/step_result.hpp), declared in the runner's namespace so
// that argument-dependent lookup finds it, and the protocol's names for its types.
#pragma once

#include "actorllm/proto/request_output.hpp"
#include "runner/step_result.hpp"

#include <caf/meta/type_name.hpp>

namespace actorllm::model {

/// CAF inspection of eplb_stats.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, eplb_stats& x) {
  return f(caf::meta::type_name("eplb_stats"), x.rearrangements, x.last_stall_seconds, x.mean_before, x.max_before,
           x.mean_after, x.max_after);
}

}  // namespace actorllm::model

namespace actorllm::runner {

/// CAF inspection of sampled_token.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampled_token& x) {
  return f(caf::meta::type_name("sampled_token"), x.token, x.logprob, x.top);
}

/// CAF inspection of prompt_score.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, prompt_score& x) {
  return f(caf::meta::type_name("prompt_score"), x.seq, x.position, x.token, x.logprob, x.rank, x.top);
}

/// CAF inspection of step_result.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.step_id, x.tokens, x.prompt_scores, x.error, x.forward_seconds,
           x.sample_seconds, x.expert_tokens, x.eplb, x.ep_exchange_bytes);
}

}  // namespace actorllm::runner

namespace actorllm::proto {

using runner::prompt_score;   ///< a score row's result
using runner::sampled_token;  ///< one sample row's token
using runner::step_result;    ///< a step's result, from the sampler shard to the scheduler

}  // namespace actorllm::proto
