// One structured-output request on stories260K, sampled (seeded), that the executors' suites run in one process and
// on their own executor: the constrained text must come out the same.
#pragma once

#include "actorllm/sampling_params.hpp"

#include <cstdint>
#include <vector>

namespace actorllm::test {

/// Seeded sampling at temperature 1, constrained to a short sentence about Tom or Lily.
inline sampling_params structured_story_params() {
  sampling_params p;
  p.temperature = 1.0f;
  p.seed = 9;
  p.max_tokens = 60;
  p.structured_pattern = "(?:Tom|Lily) (?:is|was) [a-z]{2,12}\\.";
  return p;
}

/// The prompt's token ids (BOS and two story tokens).
inline std::vector<int32_t> structured_story_prompt() { return {1, 403, 411}; }

}  // namespace actorllm::test
