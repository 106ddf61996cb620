// Seeded random prompts and arrival times for `actorllm bench serve`.
#include "apps/bench_serve/workload.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace actorllm::app::bench {

void validate(const random_dataset_options& o) {
  if (o.num_prompts < 1)
    throw std::invalid_argument(fmt::format("--num-prompts: must be at least 1, got {}", o.num_prompts));
  if (o.input_len < 1)
    throw std::invalid_argument(fmt::format("--random-input-len: must be at least 1, got {}", o.input_len));
  if (o.prefix_len < 0)
    throw std::invalid_argument(fmt::format("--random-prefix-len: must be at least 0, got {}", o.prefix_len));
  if (o.output_len < 1)
    throw std::invalid_argument(fmt::format("--random-output-len: must be at least 1, got {}", o.output_len));
  if (!(o.range_ratio >= 0 && o.range_ratio < 1))
    throw std::invalid_argument(fmt::format("--random-range-ratio: must be in [0, 1), got {}", o.range_ratio));
  if (o.vocab_size <= o.first_token_id)
    throw std::invalid_argument(
        fmt::format("--random-vocab-size: must be more than {} (ids below it are skipped as special), got {}",
                    o.first_token_id, o.vocab_size));
}

namespace {

int64_t draw_length(std::mt19937_64& rng, int64_t len, double ratio) {
  const auto lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 - ratio))));
  const auto hi = std::max<int64_t>(lo, static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 + ratio))));
  return std::uniform_int_distribution<int64_t>{lo, hi}(rng);
}

}  // namespace

std::vector<bench_request> random_requests(const random_dataset_options& o) {
  validate(o);
  std::mt19937_64 rng{o.seed};
  std::uniform_int_distribution<int32_t> token{o.first_token_id, o.vocab_size - 1};
  std::vector<bench_request> out(static_cast<std::size_t>(o.num_prompts));
  // The prefix comes from its own stream, so that --random-prefix-len 0 leaves the prompts as they were.
  std::mt19937_64 prefix_rng{o.seed ^ 0x5851f42d4c957f2dull};
  std::vector<int32_t> prefix(static_cast<std::size_t>(o.prefix_len));
  for (auto& id : prefix)
    id = token(prefix_rng);
  for (auto& r : out) {
    const int64_t in_len = draw_length(rng, o.input_len, o.range_ratio);
    r.max_tokens = draw_length(rng, o.output_len, o.range_ratio);
    r.prompt_ids = prefix;
    r.prompt_ids.resize(prefix.size() + static_cast<std::size_t>(in_len));
    for (auto id = r.prompt_ids.begin() + static_cast<std::ptrdiff_t>(prefix.size()); id != r.prompt_ids.end(); ++id)
      *id = token(rng);
  }
  return out;
}

std::vector<double> arrival_offsets(int64_t n, double rate, double burstiness, uint64_t seed) {
  if (!(rate > 0))
    throw std::invalid_argument(fmt::format("--request-rate: must be positive (or inf), got {}", rate));
  if (!(burstiness > 0))
    throw std::invalid_argument(fmt::format("--burstiness: must be positive, got {}", burstiness));
  std::vector<double> out(static_cast<std::size_t>(std::max<int64_t>(n, 0)), 0.0);
  if (std::isinf(rate))
    return out;
  // A separate stream from the prompts' so changing the rate does not change the prompts.
  std::mt19937_64 rng{seed ^ 0x9e3779b97f4a7c15ull};
  std::gamma_distribution<double> gap{burstiness, 1.0 / (rate * burstiness)};
  double t = 0;
  for (std::size_t i = 1; i < out.size(); ++i) {
    t += gap(rng);
    out[i] = t;
  }
  return out;
}

}  // namespace actorllm::app::bench
