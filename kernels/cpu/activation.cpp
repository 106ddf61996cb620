// Element-wise activations, vectorised with the shared vector exp.
#include "kernels/cpu/activation.hpp"

#include "kernels/cpu/simd.hpp"

namespace actorllm::cpu {

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  constexpr int w = simd::width;
  const simd::vf one = simd::set1(1.0f);
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    simd::vf g = simd::load(gate + i);
    simd::vf e = simd::exp(simd::sub(simd::zero(), g));
    simd::store(out + i, simd::div(simd::mul(g, simd::load(up + i)), simd::add(one, e)));
  }
  for (; i < n; ++i) {
    float g = gate[i];
    out[i] = g * up[i] / (1.0f + simd::exp_scalar(-g));
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  constexpr int w = simd::width;
  int64_t i = 0;
  for (; i + w <= n; i += w)
    simd::store(y + i, simd::add(simd::load(y + i), simd::load(x + i)));
  for (; i < n; ++i)
    y[i] += x[i];
}

}  // namespace actorllm::cpu
