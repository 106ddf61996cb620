// The per-sequence random generator of the samplers (xoshiro256** seeded through splitmix64).
#include "kernels/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace actorllm::ops {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

sampler_rng::sampler_rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_)
    s = splitmix64(x);
}

uint64_t sampler_rng::next() {
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double sampler_rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

row_logprobs logprobs_of(std::span<const float> logits, int32_t token, int32_t k) {
  auto value = [&](size_t i) {
    const float v = logits[i];
    return std::isnan(v) ? -std::numeric_limits<double>::infinity() : static_cast<double>(v);
  };
  double max = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < logits.size(); ++i)
    max = std::max(max, value(i));
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i)
    sum += std::exp(value(i) - max);
  const double log_z = max + std::log(sum);
  row_logprobs out;
  const double mine = value(static_cast<size_t>(token));
  out.logprob = static_cast<float>(mine - log_z);
  out.rank = 1;
  for (size_t i = 0; i < logits.size(); ++i)
    if (value(i) > mine)
      ++out.rank;
  const size_t n_top = std::min(logits.size(), static_cast<size_t>(std::max(k, 0)));
  if (n_top > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<int32_t>(i);
    const auto before = [&](int32_t a, int32_t b) {  // larger logit first, ties by lower id
      const double va = value(static_cast<size_t>(a)), vb = value(static_cast<size_t>(b));
      return va != vb ? va > vb : a < b;
    };
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n_top), ids.end(), before);
    out.top.reserve(n_top);
    for (size_t i = 0; i < n_top; ++i)
      out.top.push_back({ids[i], static_cast<float>(value(static_cast<size_t>(ids[i])) - log_z)});
  }
  return out;
}

}  // namespace actorllm::ops
