// What `actorllm bench serve` sends and when: random token-id prompts (vLLM's "random" dataset) and the request
// arrival times (Poisson, or gamma with --burstiness, as vLLM's get_request). Pure and seeded: the same options
// give the same workload.
#pragma once

#include <cstdint>
#include <vector>

namespace actorllm::app::bench {

/// One request of the workload.
struct bench_request {
  std::vector<int32_t> prompt_ids;
  int64_t max_tokens = 0;
};

/// Options of the random dataset.
struct random_dataset_options {
  int64_t num_prompts = 100;
  int64_t input_len = 128;
  /// Tokens of one random prefix every prompt starts with, before its own input_len tokens (vLLM's
  /// --random-prefix-len: a shared system prompt, for prefix caching).
  int64_t prefix_len = 0;
  int64_t output_len = 128;
  double range_ratio = 0;      ///< lengths uniform in [len * (1 - r), len * (1 + r)], r in [0, 1)
  int32_t vocab_size = 256;    ///< token ids are drawn from [first_token_id, vocab_size)
  int32_t first_token_id = 3;  ///< skips the special ids (<unk>, <s>, </s> in Llama-style vocabularies)
  uint64_t seed = 0;
};

/// Throws std::invalid_argument naming the flag when an option is out of range.
void validate(const random_dataset_options& o);

/// `o.num_prompts` requests with prompt and output lengths drawn as vLLM's RandomDataset draws them.
std::vector<bench_request> random_requests(const random_dataset_options& o);

/// Seconds after the start at which each of `n` requests is sent: all 0 for an infinite `rate`, else the
/// running sum of gamma(burstiness, 1 / (rate * burstiness)) gaps (exponential, i.e. Poisson arrivals, at
/// burstiness 1), the first request at 0.
std::vector<double> arrival_offsets(int64_t n, double rate, double burstiness, uint64_t seed);

}  // namespace actorllm::app::bench
