// Serialization of the public output types (deltas, final outputs, logprobs, usage): the engine sends these to
// whoever submitted the request.
#pragma once

#include "actorllm/proto/optional_field.hpp"
#include "actorllm/request_output.hpp"

#include <caf/meta/type_name.hpp>

namespace actorllm {

/// CAF inspection of token_logprob.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprob& x) {
  return f(caf::meta::type_name("token_logprob"), x.token, x.logprob);
}

/// CAF inspection of sample_logprobs.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sample_logprobs& x) {
  return f(caf::meta::type_name("sample_logprobs"), x.token, x.logprob, x.top);
}

/// CAF inspection of prompt_logprob.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, prompt_logprob& x) {
  return f(caf::meta::type_name("prompt_logprob"), x.token, x.logprob, x.rank, x.top);
}

/// CAF inspection of completion_output.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, completion_output& x) {
  proto::optional_field reason{x.finish_reason};
  proto::optional_field stop_string{x.stop_string};
  proto::optional_field stop_token_id{x.stop_token_id};
  return f(caf::meta::type_name("completion_output"), x.index, x.token_ids, x.text, reason, stop_string, stop_token_id,
           x.logprobs, x.cumulative_logprob);
}

/// CAF inspection of usage_info.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, usage_info& x) {
  return f(caf::meta::type_name("usage_info"), x.prompt_tokens, x.completion_tokens);
}

/// CAF inspection of request_output.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_output& x) {
  return f(caf::meta::type_name("request_output"), x.request_id, x.prompt, x.prompt_token_ids, x.outputs,
           x.prompt_logprobs, x.finished, x.usage);
}

/// CAF inspection of stream_delta.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_delta& x) {
  proto::optional_field reason{x.finish_reason};
  return f(caf::meta::type_name("stream_delta"), x.request_id, x.index, x.token_ids, x.text, x.logprobs, reason);
}

}  // namespace actorllm
