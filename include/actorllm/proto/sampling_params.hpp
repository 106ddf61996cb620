// Serialization of the public sampling_params and engine_config, which travel inside requests and to worker
// processes, and of the sampling spec the sampler shard applies (kernels/sampling.hpp: ops::sampling_params plus seed,
// pattern and logprob_token_ids), declared in namespace actorllm::ops so that argument-dependent lookup finds it.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actorllm/proto/optional_field.hpp"
#include "actorllm/sampling_params.hpp"
#include "kernels/sampling.hpp"

#include <caf/meta/type_name.hpp>

namespace actorllm {

/// CAF inspection of sampling_params (found by argument-dependent lookup).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  proto::optional_field seed{x.seed};
  proto::optional_field max_tokens{x.max_tokens};
  proto::optional_field logprobs{x.logprobs};
  proto::optional_field prompt_logprobs{x.prompt_logprobs};
  return f(caf::meta::type_name("sampling_params"), x.n, x.temperature, x.top_p, x.top_k, x.min_p, x.presence_penalty,
           x.frequency_penalty, x.repetition_penalty, seed, max_tokens, x.min_tokens, x.stop, x.stop_token_ids,
           x.include_stop_str_in_output, x.ignore_eos, logprobs, prompt_logprobs, x.skip_special_tokens, x.logit_bias,
           x.allowed_token_ids, x.bad_words, x.structured_pattern, x.reasoning_end_token_id, x.reasoning_start_token_id,
           x.logprob_token_ids);
}

/// CAF inspection of engine_config.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_config& x) {
  uint64_t kv_cache_memory = x.kv_cache_memory;
  return f(caf::meta::type_name("engine_config"), x.model, x.tokenizer, x.tensor_parallel_size,
           x.pipeline_parallel_size, x.pp_layer_partition, x.enable_expert_parallel, x.enable_eplb, x.eplb.window_size,
           x.eplb.step_interval, x.eplb.num_redundant_experts, x.eplb.log_balancedness, x.decode_context_parallel_size,
           x.dcp_kv_cache_interleave_size, x.prefill_context_parallel_size, x.max_num_seqs, x.max_num_batched_tokens,
           x.block_size, kv_cache_memory, x.max_model_len, x.load_format, x.dtype, x.kv_cache_dtype, x.quantization,
           x.enable_lora, x.max_loras, x.max_lora_rank, x.max_cpu_loras, x.device, x.seed, x.threads,
           x.scheduling_policy, caf::meta::load_callback([&]() -> caf::error {
             x.kv_cache_memory = static_cast<size_t>(kv_cache_memory);
             return caf::none;
           }));
}

}  // namespace actorllm

namespace actorllm::ops {

/// CAF inspection of the kernels' sampling settings.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  return f(caf::meta::type_name("ops_sampling_params"), x.temperature, x.top_p, x.top_k, x.min_p, x.repetition_penalty,
           x.presence_penalty, x.frequency_penalty, x.logprobs, x.prompt_logprobs, x.allowed_token_ids, x.bad_words,
           x.min_tokens, x.min_tokens_stop_ids, x.logit_bias);
}

/// CAF inspection of sampling_spec.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_spec& x) {
  return f(caf::meta::type_name("sampling_spec"), x.params, x.seed, x.structured_pattern, x.reasoning_end_token_id,
           x.logprob_token_ids);
}

}  // namespace actorllm::ops
