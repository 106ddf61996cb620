// Element types and scalar conversions.
#include "kernels/dtype.hpp"

#if defined(__AVX512F__)
// GCC 12's intrinsics trip -Wmaybe-uninitialized where inlined (GCC bug 105593), as in kernels/cpu/simd.hpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace actorllm {

void fp8_e4m3_round_trip_to_bf16(const float* w, int64_t n, float scale, uint16_t* out) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  // f32_to_fp8_e4m3's cases on 16 lanes, producing the e4m3 value itself (what fp8_e4m3_to_f32 gives for the code):
  // NaN -> the table's quiet NaN; >= 448 -> 448; below 2^-6 -> a multiple of 2^-9, the integer rounded by adding and
  // taking away 2^23 (ties to even); else the float with 3 mantissa bits left, rounded to nearest even in its bits.
  // Then times the scale, and f32_to_bf16's rounding in integers (NaN: the top half with the quiet bit).
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), sign_mask = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i inf = _mm512_set1_epi32(0x7f800000), max_finite = _mm512_set1_epi32(0x43e00000);
  const __m512i min_normal = _mm512_set1_epi32(0x3c800000), quiet_nan = _mm512_set1_epi32(0x7fc00000);
  const __m512 two23 = _mm512_set1_ps(8388608.0f), steps_per_unit = _mm512_set1_ps(512.0f),
               unit = _mm512_set1_ps(1.0f / 512.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_castps_si512(_mm512_div_ps(_mm512_loadu_ps(w + i), s));
    const __m512i a = _mm512_and_si512(u, abs_mask), sign = _mm512_and_si512(u, sign_mask);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, inf);
    const __mmask16 saturated = _mm512_cmpge_epu32_mask(a, max_finite);
    const __mmask16 subnormal = _mm512_cmplt_epu32_mask(a, min_normal);
    // normal: (a + 0x7ffff + bit 20 of a) with the low 20 bits cleared
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
    __m512i v = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x7ffff)), odd),
                                 _mm512_set1_epi32(static_cast<int>(~0xfffffu)));
    const __m512 steps = _mm512_mul_ps(_mm512_castsi512_ps(a), steps_per_unit);
    const __m512 whole = _mm512_sub_ps(_mm512_add_ps(steps, two23), two23);
    v = _mm512_mask_mov_epi32(v, subnormal, _mm512_castps_si512(_mm512_mul_ps(whole, unit)));
    v = _mm512_mask_mov_epi32(v, saturated, max_finite);
    v = _mm512_or_si512(v, sign);
    v = _mm512_mask_mov_epi32(v, nan, quiet_nan);  // code 0x7f, no sign
    const __m512i p = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(v), s));
    const __mmask16 p_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(p, abs_mask), inf);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(p, 16), _mm512_set1_epi32(1));
    __m512i h = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(p, _mm512_set1_epi32(0x7fff)), lsb), 16);
    h = _mm512_mask_mov_epi32(h, p_nan, _mm512_or_si512(_mm512_srli_epi32(p, 16), _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(h));
  }
#endif
  for (; i < n; ++i)
    out[i] = f32_to_bf16(fp8_e4m3_to_f32(f32_to_fp8_e4m3(w[i] / scale)) * scale);
}

std::optional<dtype> parse_dtype(std::string_view s) {
  if (s == "F32" || s == "float32" || s == "float" || s == "f32" || s == "fp32")
    return dtype::f32;
  if (s == "F16" || s == "float16" || s == "half" || s == "f16" || s == "fp16")
    return dtype::f16;
  if (s == "BF16" || s == "bfloat16" || s == "bf16")
    return dtype::bf16;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits = 0;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u)                          // rounds to >= 65520: overflow to inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {  // below the smallest normal f16: subnormal or zero
    if (abs < 0x33000000u)
      return static_cast<uint16_t>(sign);
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 + (113 - e) - 1 + ... aligns to f16 subnormal units
    uint32_t half = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u)))
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t e = (abs >> 23) - 127 + 15;
  uint32_t m = abs & 0x7fffffu;
  uint32_t h = (e << 10) | (m >> 13);
  uint32_t rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
    ++h;
  return static_cast<uint16_t>(sign | h);
}

}  // namespace actorllm
