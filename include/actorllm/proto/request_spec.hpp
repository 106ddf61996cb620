// A request as the engine hands it to the scheduler: tokenized, validated, with the stop conditions the scheduler
// checks on token ids and the sampling knobs it passes on to the sampler shard; and the scheduler core's request made
// from it.
#pragma once

#include "actorllm/proto/optional_field.hpp"
#include "actorllm/proto/step_plan.hpp"
#include "engine/request.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actorllm::proto {

/// A tokenized request: engine::request's fields under the protocol's names (to_engine_request).
struct request_spec {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt_ids;
  std::optional<int32_t> max_tokens;  ///< unset: up to max_model_len
  int32_t n = 1;
  int32_t priority = 0;
  std::vector<int32_t> eos_token_ids;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  int32_t min_tokens = 0;
  ops::sampling_spec sampling;
  std::optional<std::string> cache_salt;   ///< mixed into the prefix cache's block hashes; unset: no salt
  std::vector<int32_t> resume_output_ids;  ///< failover: sequence 0's output so far (n = 1); empty: a fresh request
  lora_ref lora;                           ///< the LoRA adapter the request runs with; id 0: the base model

  friend bool operator==(const request_spec&, const request_spec&) = default;
};

/// CAF inspection of request_spec.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_spec& x) {
  optional_field max_tokens{x.max_tokens};
  optional_field cache_salt{x.cache_salt};
  return f(caf::meta::type_name("request_spec"), x.request_id, x.prompt_ids, max_tokens, x.n, x.priority,
           x.eos_token_ids, x.ignore_eos, x.stop_token_ids, x.min_tokens, x.sampling, cache_salt, x.resume_output_ids,
           x.lora);
}

/// The scheduler core's request: the same fields (moved out of `spec`); the prompt is scored when the sampler is to
/// report prompt logprobs.
inline engine::request to_engine_request(request_spec&& spec) {
  engine::request req;
  req.id = spec.request_id;
  req.prompt = std::move(spec.prompt_ids);
  req.max_tokens = spec.max_tokens;
  req.n = spec.n;
  req.priority = spec.priority;
  req.eos_token_ids = std::move(spec.eos_token_ids);
  req.ignore_eos = spec.ignore_eos;
  req.stop_token_ids = std::move(spec.stop_token_ids);
  req.min_tokens = spec.min_tokens;
  req.cache_salt = std::move(spec.cache_salt);
  req.resume_output = std::move(spec.resume_output_ids);
  req.score_prompt = spec.sampling.params.prompt_logprobs >= 0;
  req.lora = std::move(spec.lora);
  req.sampling = std::move(spec.sampling);
  return req;
}

}  // namespace actorllm::proto
