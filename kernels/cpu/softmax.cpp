// Softmax and log-softmax: one vector pass for the max, one for the sum of exponentials (f32 lanes, combined in
// double, which keeps a 128k vocabulary's sum accurate to ~1e-7 relative), one to write the result.
#include "kernels/cpu/softmax.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/simd.hpp"

namespace actorllm::cpu {
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// sum(exp(x - m)); when `store`, also writes exp(x - m) back into x.
template <bool store>
double sum_exp(float* x, int64_t n, float m) {
  constexpr int w = simd::width;
  // Each f32 lane sums at most 64 terms before the partial sum moves into the double total, so the rounding
  // error does not grow with the vocabulary size (nor with a narrow vector width).
  constexpr int64_t block = 64 * 2 * w;
  simd::vf vm = simd::set1(m);
  double sum = 0;
  int64_t i = 0;
  while (i + 2 * w <= n) {
    simd::vf s0 = simd::zero(), s1 = s0;
    int64_t end = std::min(n, i + block);
    for (; i + 2 * w <= end; i += 2 * w) {
      simd::vf e0 = simd::exp(simd::sub(simd::load(x + i), vm));
      simd::vf e1 = simd::exp(simd::sub(simd::load(x + i + w), vm));
      if constexpr (store) {
        simd::store(x + i, e0);
        simd::store(x + i + w, e1);
      }
      s0 = simd::add(s0, e0);
      s1 = simd::add(s1, e1);
    }
    sum += simd::reduce_add(simd::add(s0, s1));
  }
  for (; i < n; ++i) {
    float e = simd::exp_scalar(x[i] - m);
    if constexpr (store)
      x[i] = e;
    sum += e;
  }
  return sum;
}

}  // namespace

float max_value(const float* x, int64_t n) {
  constexpr int w = simd::width;
  simd::vf vm = simd::set1(neg_inf);
  int64_t i = 0;
  // max(acc, x): a NaN lane of x is dropped because x is the first operand (x86 returns the second on NaN).
  for (; i + w <= n; i += w)
    vm = simd::max(simd::load(x + i), vm);
  float m = simd::reduce_max(vm);
  for (; i < n; ++i)
    if (x[i] > m)
      m = x[i];
  return m;
}

float log_sum_exp_shifted(const float* x, int64_t n, float m) {
  // sum_exp<false> only reads x.
  return static_cast<float>(std::log(sum_exp<false>(const_cast<float*>(x), n, m)));
}

float log_sum_exp(const float* x, int64_t n) {
  float m = max_value(x, n);
  if (m == neg_inf)
    return neg_inf;
  return static_cast<float>(static_cast<double>(m) + std::log(sum_exp<false>(const_cast<float*>(x), n, m)));
}

void softmax(float* x, int64_t n) {
  if (n <= 0)
    return;
  float m = max_value(x, n);
  if (m == neg_inf) {
    for (int64_t i = 0; i < n; ++i)
      x[i] = 1.0f / static_cast<float>(n);
    return;
  }
  auto inv = static_cast<float>(1.0 / sum_exp<true>(x, n, m));
  constexpr int w = simd::width;
  simd::vf vinv = simd::set1(inv);
  int64_t i = 0;
  for (; i + w <= n; i += w)
    simd::store(x + i, simd::mul(simd::load(x + i), vinv));
  for (; i < n; ++i)
    x[i] *= inv;
}

void log_softmax(float* x, int64_t n) {
  if (n <= 0)
    return;
  float m = max_value(x, n);
  if (m == neg_inf) {
    float u = -std::log(static_cast<float>(n));
    for (int64_t i = 0; i < n; ++i)
      x[i] = u;
    return;
  }
  // (x - m) - log(sum): x - m is exact near the maximum, where precision matters most.
  float ls = log_sum_exp_shifted(x, n, m);
  constexpr int w = simd::width;
  simd::vf vm = simd::set1(m), vl = simd::set1(ls);
  int64_t i = 0;
  for (; i + w <= n; i += w)
    simd::store(x + i, simd::sub(simd::sub(simd::load(x + i), vm), vl));
  for (; i < n; ++i)
    x[i] = (x[i] - m) - ls;
}

}  // namespace actorllm::cpu
