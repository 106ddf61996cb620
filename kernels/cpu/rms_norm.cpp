// RMSNorm, vectorised per row.
#include "kernels/cpu/rms_norm.hpp"
#include "util/check.hpp"

#include <cmath>

#include "kernels/cpu/simd.hpp"

namespace actorllm::cpu {
namespace {

template <dtype D>
void rms_norm_impl(const float* x, int64_t n_tokens, int64_t n_embd, const void* weight, float eps, float* y) {
  constexpr int w = simd::width;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xr = x + t * n_embd;
    float* yr = y + t * n_embd;
    // Four independent accumulators hide the FMA latency.
    simd::vf s0 = simd::zero(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 4 * w <= n_embd; i += 4 * w) {
      simd::vf a = simd::load(xr + i), b = simd::load(xr + i + w);
      simd::vf c = simd::load(xr + i + 2 * w), d = simd::load(xr + i + 3 * w);
      s0 = simd::fmadd(a, a, s0);
      s1 = simd::fmadd(b, b, s1);
      s2 = simd::fmadd(c, c, s2);
      s3 = simd::fmadd(d, d, s3);
    }
    for (; i + w <= n_embd; i += w) {
      simd::vf a = simd::load(xr + i);
      s0 = simd::fmadd(a, a, s0);
    }
    double ss = simd::reduce_add(simd::add(simd::add(s0, s1), simd::add(s2, s3)));
    for (; i < n_embd; ++i)
      ss += static_cast<double>(xr[i]) * xr[i];
    float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n_embd) + static_cast<double>(eps)));

    simd::vf vinv = simd::set1(inv);
    i = 0;
    for (; i + w <= n_embd; i += w)
      simd::store(yr + i, simd::mul(simd::mul(simd::load(xr + i), vinv), simd::load_as<D>(weight, i)));
    for (; i < n_embd; ++i)
      yr[i] = xr[i] * inv * load_as_f32(weight, D, static_cast<size_t>(i));
  }
}

}  // namespace

void rms_norm(const float* x, int64_t n_tokens, int64_t n_embd, const void* weight, dtype wtype, float eps, float* y) {
  if (n_embd <= 0)
    return;
  switch (wtype) {
    case dtype::f32:
      rms_norm_impl<dtype::f32>(x, n_tokens, n_embd, weight, eps, y);
      return;
    case dtype::f16:
      rms_norm_impl<dtype::f16>(x, n_tokens, n_embd, weight, eps, y);
      return;
    case dtype::bf16:
      rms_norm_impl<dtype::bf16>(x, n_tokens, n_embd, weight, eps, y);
      return;
    case dtype::fp8_e4m3:
    case dtype::i32:
    case dtype::i64:
      ACTORLLM_CHECK(false, "rms_norm: integer types hold no weights or activations");
  }
}

}  // namespace actorllm::cpu
