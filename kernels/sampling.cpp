// The per-sequence random generator of the samplers (xoshiro256** seeded through splitmix64) and its seeds.
#include "kernels/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

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

uint64_t sequence_seed(uint64_t seed, uint32_t index) {
  if (index == 0)
    return seed;
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (uint64_t{index} + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t default_request_seed(uint64_t engine_seed, uint64_t request_id) {
  // A different stream per request, never the engine seed itself (that is sequence_seed's input).
  return sequence_seed(engine_seed ^ 0x5bd1e9955bd1e995ULL, static_cast<uint32_t>(request_id % 0xffffffffULL) + 1) ^
         (request_id >> 32);
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

std::vector<token_logprob> top_logprobs(const float* x, int64_t n, int64_t k, float m, float ls) {
  k = std::min(k, n);
  // "a ranks above b": larger value, then lower id. With it as the heap's less-than, heap.front() is the
  // lowest-ranked token kept so far.
  const auto ranks_above = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::vector<std::pair<float, int32_t>> heap;
  heap.reserve(static_cast<size_t>(std::max<int64_t>(k, 0)));
  for (int64_t i = 0; i < n && k > 0; ++i) {
    const std::pair<float, int32_t> entry{x[i], static_cast<int32_t>(i)};
    if (static_cast<int64_t>(heap.size()) < k) {
      heap.push_back(entry);
      std::push_heap(heap.begin(), heap.end(), ranks_above);
    } else if (ranks_above(entry, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), ranks_above);
      heap.back() = entry;
      std::push_heap(heap.begin(), heap.end(), ranks_above);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), ranks_above);
  std::vector<token_logprob> out;
  out.reserve(heap.size());
  for (auto [v, id] : heap)
    out.push_back({id, m == -std::numeric_limits<float>::infinity() ? -std::log(static_cast<float>(n)) : (v - m) - ls});
  return out;
}

namespace {

// The sampler's view of a logit: NaN is -inf, +inf the largest finite value.
float sanitized(float v) {
  return std::isnan(v) ? -std::numeric_limits<float>::infinity() : std::min(v, std::numeric_limits<float>::max());
}

// A sanitized row's max m and log(sum(exp(x - m))) (0 when every entry is -inf), the sum in double: a whole
// vocabulary of terms.
std::pair<float, float> row_normalizer(std::span<const float> logits) {
  float m = -std::numeric_limits<float>::infinity();
  for (float v : logits)
    m = std::max(m, sanitized(v));
  if (m == -std::numeric_limits<float>::infinity())
    return {m, 0.0f};
  double sum = 0.0;
  for (float v : logits)
    sum += std::exp(static_cast<double>(sanitized(v)) - m);
  return {m, static_cast<float>(std::log(sum))};
}

// A token's logprob in a row normalized by (m, ls); a row of all -inf is uniform.
float row_logprob(float v, float m, float ls, size_t n) {
  return m == -std::numeric_limits<float>::infinity() ? -std::log(static_cast<float>(n)) : (v - m) - ls;
}

}  // namespace

row_logprobs logprobs_of(std::span<const float> logits, int32_t token, int32_t k) {
  thread_local std::vector<float> row;
  row.resize(logits.size());
  std::transform(logits.begin(), logits.end(), row.begin(), sanitized);
  const auto [m, ls] = row_normalizer(row);
  const auto n = static_cast<int64_t>(row.size());
  row_logprobs out;
  const float mine = row[static_cast<size_t>(token)];
  out.logprob = row_logprob(mine, m, ls, row.size());
  out.rank = 1 + static_cast<int32_t>(std::count_if(row.begin(), row.end(), [&](float v) { return v > mine; }));
  out.top = top_logprobs(row.data(), n, k, m, ls);
  return out;
}

std::vector<token_logprob> logprobs_of_tokens(std::span<const float> logits, std::span<const int32_t> tokens) {
  const auto [m, ls] = row_normalizer(logits);
  std::vector<token_logprob> out;
  out.reserve(tokens.size());
  for (int32_t t : tokens)
    out.push_back({t, row_logprob(sanitized(logits[static_cast<size_t>(t)]), m, ls, logits.size())});
  return out;
}

}  // namespace actorllm::ops
