// Inputs for the TP collective tests: per-rank random vectors, reproducible from a seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace actorllm::test {

/// inputs[rank]: n floats in [-1, 1), different per rank and per seed.
inline std::vector<std::vector<float>> random_inputs(int n_rank, int64_t n, uint32_t seed) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> dist{-1.0f, 1.0f};
  std::vector<std::vector<float>> inputs(static_cast<size_t>(n_rank), std::vector<float>(static_cast<size_t>(n)));
  for (auto& v : inputs)
    for (auto& x : v)
      x = dist(rng);
  return inputs;
}

}  // namespace actorllm::test
