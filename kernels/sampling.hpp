// What a backend's batched sampler takes and returns, with vLLM's semantics: per-request settings, the per-sequence
// random generator, and the sampled token with its logprobs. Shared by every backend.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

/// Kernel-level sampling types (the public API has its own actorllm::sampling_params).
namespace actorllm::ops {

/// Per-request sampling settings (OpenAI / vLLM names and meanings).
struct sampling_params {
  float temperature = 1.0f;         // 0 (below 1e-5) = greedy
  float top_p = 1.0f;               // (0, 1]
  int32_t top_k = 0;                // <= 0: off
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // prompt + output tokens (HF/vLLM: logit > 0 ? logit / p : logit * p)
  float presence_penalty = 0.0f;    // output tokens only (vLLM semantics)
  float frequency_penalty = 0.0f;   // output tokens only, times the count
  int32_t logprobs = -1;            // -1: none; 0: the sampled token's logprob; n > 0: also the top n
};

/// A token and its log-probability.
struct token_logprob {
  int32_t token;
  float logprob;
};

/// What sample() picked. `logprob` is always filled (it costs one pass); `top` holds min(logprobs, n_vocab)
/// entries when params.logprobs > 0, sorted by logprob descending, ties by lower token id first.
struct sample_result {
  int32_t token;
  float logprob;
  std::vector<token_logprob> top;
};

/// Per-request random generator: xoshiro256** seeded through splitmix64. Its output depends only on the seed, on
/// every platform (unlike std::uniform_*_distribution, whose algorithm is implementation-defined).
class sampler_rng {
 public:
  explicit sampler_rng(uint64_t seed);
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();
  /// The next 64 random bits.
  uint64_t next();

 private:
  uint64_t s_[4];
};

/// One row of a batched sample: the row's settings, the ids the penalties look at, and the sequence's generator.
/// Everything is borrowed for the duration of the call; `rng` advances.
struct sample_row {
  const sampling_params* params = nullptr;
  std::span<const int32_t> prompt_ids;
  std::span<const int32_t> output_ids;
  sampler_rng* rng = nullptr;
};

}  // namespace actorllm::ops
