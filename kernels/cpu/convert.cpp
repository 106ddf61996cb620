// Bulk element-type conversion.
#include "kernels/cpu/convert.hpp"
#include "util/check.hpp"

#include <cstring>

#include "kernels/cpu/simd.hpp"

namespace actorllm::cpu {
namespace {

template <dtype D>
void to_f32(const void* src, int64_t n, float* dst) {
  constexpr int w = simd::width;
  int64_t i = 0;
  for (; i + w <= n; i += w)
    simd::store(dst + i, simd::load_as<D>(src, i));
  for (; i < n; ++i)
    dst[i] = load_as_f32(src, D, static_cast<size_t>(i));
}

}  // namespace

void convert_to_f32(const void* src, dtype stype, int64_t n, float* dst) {
  if (n <= 0)
    return;  // also keeps null pointers of empty buffers away from memcpy
  switch (stype) {
    case dtype::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case dtype::f16:
      to_f32<dtype::f16>(src, n, dst);
      return;
    case dtype::bf16:
      to_f32<dtype::bf16>(src, n, dst);
      return;
    case dtype::fp8_e4m3:  // codes only (a GPU KV cache's): its scale is the caller's
      for (int64_t i = 0; i < n; ++i)
        dst[i] = fp8_e4m3_to_f32(static_cast<const uint8_t*>(src)[i]);
      return;
    case dtype::i32:
    case dtype::i64:
      ACTORLLM_CHECK(false, "convert_to_f32: integer types hold no weights or activations");
  }
}

void convert_from_f32(const float* src, int64_t n, dtype dtype_out, void* dst) {
  if (n <= 0)
    return;
  if (dtype_out == dtype::f32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  int64_t i = 0;
#if defined(ACTORLLM_SIMD_AVX512)
  // Each step's new k/v rows go through here into a bf16 or f16 KV cache: 16 at a time, rounded exactly as the
  // scalar conversions below (which define the rounding) round them.
  if (dtype_out == dtype::bf16) {
    auto* d = static_cast<uint16_t*>(dst);
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
    for (; i + 16 <= n; i += 16) {
      const __m512 x = _mm512_loadu_ps(src + i);
      const __m512i u = _mm512_castps_si512(x);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
      const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
      const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), quiet);
      const __m512i h = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), rounded, nan);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm512_cvtepi32_epi16(h));
    }
  } else if (dtype_out == dtype::f16) {
    auto* d = static_cast<uint16_t*>(dst);
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                          _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i)
    store_from_f32(dst, dtype_out, static_cast<size_t>(i), src[i]);
}

}  // namespace actorllm::cpu
