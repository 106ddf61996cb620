// A thin layer over the SIMD instruction set chosen at compile time, so that each CPU kernel is written once:
// AVX-512 (16 floats) where the compiler targets it (-march=native on this project's machines), AVX2+FMA (8
// floats) on older x86-64, and plain scalar code (width 1) everywhere else. Internal to kernels/cpu.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/dtype.hpp"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// GCC 12's intrinsics build their "undefined" pass-through operands from self-initialised locals, which
// -Wuninitialized reports wherever they are inlined (GCC bug 105593, fixed in 13). Warnings are attributed to
// the header's lines, so silencing them around the include keeps our own code fully checked.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace actorllm::cpu::simd {

#if defined(__AVX512F__)
#define ACTORLLM_SIMD_AVX512 1
/// Floats per vector.
inline constexpr int width = 16;
using vf = __m512;
/// Short human-readable name of the instruction set in use (reported by benchmarks).
inline constexpr const char* isa_name = "avx512";

inline vf zero() { return _mm512_setzero_ps(); }
inline vf set1(float a) { return _mm512_set1_ps(a); }
inline vf load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, vf a) { _mm512_storeu_ps(p, a); }
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm512_div_ps(a, b); }
/// a * b + c, one rounding.
inline vf fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
/// c - a * b, one rounding.
inline vf fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
/// Lane-wise max/min; when a lane of `b` is NaN the result is that NaN (x86 returns the second operand).
inline vf max(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm512_min_ps(a, b); }
inline vf round_nearest(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/// a * 2^n for integral-valued n; overflow gives inf, underflow denormals/zero.
inline vf ldexp(vf a, vf n) { return _mm512_scalef_ps(a, n); }
inline float reduce_add(vf a) { return _mm512_reduce_add_ps(a); }
inline float reduce_max(vf a) { return _mm512_reduce_max_ps(a); }

/// `width` f16 values, in order.
inline vf load_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
/// `width` bf16 values, in order: widen to 32 bits and shift into the high half.
inline vf load_bf16(const uint16_t* p) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
/// 2*width bf16 values split by parity: `even` gets elements 0, 2, 4, ..., `odd` gets 1, 3, 5, .... Costs one
/// load, one shift and one AND, no shuffle; the other operand of a dot product must be permuted to match
/// (see permute_for_bf16_split).
inline void load_bf16_split(const uint16_t* p, vf& even, vf& odd) {
  __m512i w = _mm512_loadu_si512(p);
  even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

/// In-register transpose of a 16x16 block of 32-bit lanes: r[i] holds row i on entry and column i on exit.
inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  // u[4i + j], 128-bit lane L, holds column 4L + j of rows 4i .. 4i+3.
  for (int j = 0; j < 4; ++j) {
    __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
    __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
    __m512 w0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    __m512 w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[4 + j] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
    r[12 + j] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
  }
}

#elif defined(__AVX2__) && defined(__FMA__)
#define ACTORLLM_SIMD_AVX2 1
inline constexpr int width = 8;
using vf = __m256;
inline constexpr const char* isa_name = "avx2";

inline vf zero() { return _mm256_setzero_ps(); }
inline vf set1(float a) { return _mm256_set1_ps(a); }
inline vf load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, vf a) { _mm256_storeu_ps(p, a); }
inline vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
inline vf max(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm256_min_ps(a, b); }
inline vf round_nearest(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/// a * 2^n for integral-valued n in [-150, 129]: split into two in-range powers so neither overflows the
/// exponent field; the final multiply rounds to inf/denormal exactly like a single scaling would.
inline vf ldexp(vf a, vf n) {
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i lo = _mm256_srai_epi32(ni, 1);
  __m256i hi = _mm256_sub_epi32(ni, lo);
  __m256i bias = _mm256_set1_epi32(127);
  vf p_lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(lo, bias), 23));
  vf p_hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(hi, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(a, p_lo), p_hi);
}
inline float reduce_add(vf a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float reduce_max(vf a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline vf load_f16(const uint16_t* p) {
#if defined(__F16C__)
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
  alignas(32) float tmp[8];
  for (int i = 0; i < 8; ++i)
    tmp[i] = f16_to_f32(p[i]);
  return _mm256_load_ps(tmp);
#endif
}
inline vf load_bf16(const uint16_t* p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
inline void load_bf16_split(const uint16_t* p, vf& even, vf& odd) {
  __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}
/// In-register transpose of an 8x8 block of 32-bit lanes: r[i] holds row i on entry and column i on exit.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  // u[4i + j], 128-bit lane L, holds column 4L + j of rows 4i .. 4i+3.
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
  }
}
/// 8 rows of bf16 as pairs of inputs: 32-bit word out[(k / 2) * stride + i] holds row i's values at inputs k (low half)
/// and k + 1 (high half), for even k < n_pad; inputs from n on, and every input of a null row, are zero. 8 x 8
/// transposes of 32-bit lanes, 16 inputs a step (no widening), then one input at a time. The pairs layout of the bf16
/// GEMM panels (kernels/cpu/matmul.cpp) and of tensor_layout::cpu_bf16_panels.
inline void transpose_bf16_pairs8(const uint16_t* const rows[8], int64_t n, int64_t n_pad, uint32_t* out,
                                  int64_t stride) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i)
      r[i] = rows[i] != nullptr ? _mm256_loadu_ps(reinterpret_cast<const float*>(rows[i] + k)) : _mm256_setzero_ps();
    transpose8(r);  // r[j]: pair k / 2 + j of the 8 rows
    for (int j = 0; j < 8; ++j)
      _mm256_storeu_ps(reinterpret_cast<float*>(out + (k / 2 + j) * stride), r[j]);
  }
  auto* out16 = reinterpret_cast<uint16_t*>(out);
  for (; k < n_pad; ++k)
    for (int i = 0; i < 8; ++i)
      out16[((k / 2) * stride + i) * 2 + (k & 1)] = rows[i] != nullptr && k < n ? rows[i][k] : uint16_t{0};
}

#else
#define ACTORLLM_SIMD_SCALAR 1
inline constexpr int width = 1;
using vf = float;
inline constexpr const char* isa_name = "scalar";

inline vf zero() { return 0.0f; }
inline vf set1(float a) { return a; }
inline vf load(const float* p) { return *p; }
inline void store(float* p, vf a) { *p = a; }
inline vf add(vf a, vf b) { return a + b; }
inline vf sub(vf a, vf b) { return a - b; }
inline vf mul(vf a, vf b) { return a * b; }
inline vf div(vf a, vf b) { return a / b; }
inline vf fmadd(vf a, vf b, vf c) { return std::fma(a, b, c); }
inline vf fnmadd(vf a, vf b, vf c) { return std::fma(-a, b, c); }
inline vf max(vf a, vf b) { return std::isnan(b) ? b : (a > b ? a : b); }
inline vf min(vf a, vf b) { return std::isnan(b) ? b : (a < b ? a : b); }
inline vf round_nearest(vf a) { return std::nearbyint(a); }
inline vf ldexp(vf a, vf n) { return std::isnan(n) ? n : std::ldexp(a, static_cast<int>(n)); }
inline float reduce_add(vf a) { return a; }
inline float reduce_max(vf a) { return a; }
inline vf load_f16(const uint16_t* p) { return f16_to_f32(*p); }
inline vf load_bf16(const uint16_t* p) { return bf16_to_f32(*p); }
inline void load_bf16_split(const uint16_t* p, vf& even, vf& odd) {
  even = bf16_to_f32(p[0]);
  odd = bf16_to_f32(p[1]);
}
#endif

/// `width` elements of a buffer of type D, starting at element i, as floats in order.
template <dtype D>
inline vf load_as(const void* p, int64_t i) {
  if constexpr (D == dtype::f32)
    return load(static_cast<const float*>(p) + i);
  else if constexpr (D == dtype::f16)
    return load_f16(static_cast<const uint16_t*>(p) + i);
  else
    return load_bf16(static_cast<const uint16_t*>(p) + i);
}

#if defined(ACTORLLM_SIMD_AVX512) || defined(ACTORLLM_SIMD_AVX2)
/// In-register transpose of a width x width block: r[i] holds row i on entry and column i on exit.
inline void transpose(vf r[width]) {
#if defined(ACTORLLM_SIMD_AVX512)
  transpose16(r);
#else
  transpose8(r);
#endif
}
#endif

/// e^x, vectorised (Cephes' single-precision polynomial after reduction by ln 2; within ~2 ulp over the
/// whole range). Overflows to +inf, underflows to 0, propagates NaN.
inline vf exp(vf x) {
#if defined(ACTORLLM_SIMD_SCALAR)
  return std::exp(x);
#else
  // Clamp first (NaN-propagating operand order): beyond these bounds the result is inf or 0 anyway.
  x = min(set1(89.0f), max(set1(-104.0f), x));
  vf n = round_nearest(mul(x, set1(1.44269504088896341f)));
  vf r = fnmadd(n, set1(0.693359375f), x);  // ln 2 split in two so that n * ln2 is exact enough
  r = fnmadd(n, set1(-2.12194440e-4f), r);
  vf p = set1(1.9875691500e-4f);
  p = fmadd(p, r, set1(1.3981999507e-3f));
  p = fmadd(p, r, set1(8.3334519073e-3f));
  p = fmadd(p, r, set1(4.1665795894e-2f));
  p = fmadd(p, r, set1(1.6666665459e-1f));
  p = fmadd(p, r, set1(5.0000001201e-1f));
  p = fmadd(p, mul(r, r), add(r, set1(1.0f)));
  return ldexp(p, n);
#endif
}

/// Scalar e^x that agrees with the vector version lane for lane (so that vector bodies and scalar tails of one
/// kernel compute identical values).
inline float exp_scalar(float x) {
#if defined(ACTORLLM_SIMD_SCALAR)
  return std::exp(x);
#else
  alignas(64) float buf[width];
  store(buf, exp(set1(x)));
  return buf[0];
#endif
}

}  // namespace actorllm::cpu::simd
