// A generation request as a front end (the embedding API, later the HTTP server) submits it to the engine: the
// prompt as text or token ids, the sampling parameters, and where the news goes.
#pragma once

#include "actorllm/proto/optional_field.hpp"
#include "actorllm/proto/request_output.hpp"
#include "actorllm/proto/sampling_params.hpp"
#include "actorllm/proto/sinks.hpp"
#include "actorllm/proto/step_plan.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::proto {

/// One request. Its id is chosen by the submitter and must not collide with a live request's (front ends sharing
/// an engine use disjoint ranges); the engine rejects a live duplicate.
struct submit_request {
  uint64_t request_id = 0;
  bool prompt_is_tokens = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  sampling_params params;
  int32_t priority = 0;                   ///< lower runs first under the priority policy
  std::optional<std::string> cache_salt;  ///< the prompt's cache_salt (prefix caching); unset: none
  bool stream = false;                    ///< send per-step deltas, not just the final output
  output_sink sink;                       ///< receives the deltas, the output or the failure
  /// Failover: the tokens a replica that died had already generated for sequence 0 (with their logprobs), in order.
  /// The engine continues the request from there: it prefills the prompt plus these tokens, the sampler resumes
  /// with the same state, and deltas and the output carry on as if nothing had happened (the final output holds
  /// every token). Only for n = 1; empty: a fresh request.
  std::vector<sample_logprobs> resume_tokens;
  lora_ref lora;  ///< the LoRA adapter (checked by the submitter); id 0: the base model

  friend bool operator==(const submit_request&, const submit_request&) = default;
};

/// CAF inspection of submit_request.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, submit_request& x) {
  optional_field cache_salt{x.cache_salt};
  return f(caf::meta::type_name("submit_request"), x.request_id, x.prompt_is_tokens, x.prompt_text, x.prompt_ids,
           x.params, x.priority, cache_salt, x.stream, x.sink, x.resume_tokens, x.lora);
}

}  // namespace actorllm::proto
