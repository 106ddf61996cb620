// What the scheduler needs to know about a generation request: the prompt's token ids and the stop conditions it
// can check by itself on token ids (stop strings need the detokenizer and stay with the engine), the LoRA adapter its
// rows apply, and the sampling spec it hands on to the sampler shard (kernels/sampling.hpp: plain types).
#pragma once

#include "kernels/sampling.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actorllm::engine {

/// A LoRA adapter as the shards load it (vLLM's LoRARequest): `id` > 0 names it in plans (unique among the adapters
/// of one engine; a reloaded adapter gets a new id), `path` is its PEFT directory, `name` is for messages.
struct lora_ref {
  int32_t id = 0;
  std::string name;
  std::string path;

  friend bool operator==(const lora_ref&, const lora_ref&) = default;
};

/// A tokenized generation request as the engine hands it to the scheduler.
struct request {
  uint64_t id = 0;                      ///< unique among live requests; its sequences are {id, 0} .. {id, n - 1}
  std::vector<int32_t> prompt;          ///< prompt token ids (at least one)
  std::optional<int32_t> max_tokens;    ///< output tokens per sequence; unset: up to max_model_len
  int32_t n = 1;                        ///< output sequences sharing the prompt (prefilled once, KV blocks shared)
  int32_t priority = 0;                 ///< lower runs first under the priority policy; ignored under fcfs
  std::vector<int32_t> eos_token_ids;   ///< end-of-sequence ids: finish with `stop` unless ignore_eos
  bool ignore_eos = false;              ///< keep generating through eos (stop_token_ids still stop)
  std::vector<int32_t> stop_token_ids;  ///< further ids that finish with `stop` (the token is kept in the output)
  int32_t min_tokens = 0;               ///< no eos / stop-token finish before this many output tokens
  /// Mixed into the hash of the prompt's first KV block: only requests with the same salt share cached blocks
  /// (vLLM's cache_salt, against timing attacks between tenants). Unset: shared with every unsalted request.
  std::optional<std::string> cache_salt;
  /// Failover: the output sequence 0 already had on a replica that died (n = 1 only). The sequence starts with
  /// prompt + these tokens, all to prefill, and counts them as output (max_tokens, min_tokens); empty: fresh.
  std::vector<int32_t> resume_output;
  /// Score the prompt: each prompt position's logits are computed (not only the last one's), so that the sampler
  /// reports the logprob of the prompt token that follows. Such a request bypasses the prefix cache.
  bool score_prompt = false;
  /// The LoRA adapter the request's rows apply (id > 0), or id 0 for the base model. At most
  /// scheduler_config::max_loras adapters run at once; the adapter is part of the prefix cache's key (its KV differs
  /// from the base model's). Plans name it in step_plan::loras while one of its sequences is scheduled.
  lora_ref lora;
  /// The sampling spec: it goes to the sampler shard with the request's first sample or score row
  /// (step_plan::new_requests); the scheduler reads only whether the repetition penalty needs the prompt.
  ops::sampling_spec sampling;
};

}  // namespace actorllm::engine
