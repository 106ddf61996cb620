// The per-sequence random generator of the samplers (xoshiro256** seeded through splitmix64).
#include "kernels/sampling.hpp"

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

}  // namespace actorllm::ops
