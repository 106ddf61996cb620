// The KV cache's element types on the GPU and the fp8 e4m3 arithmetic of --kv-cache-dtype fp8, as __host__
// __device__ functions: write_kv and the attention kernels call exactly these, and
// tests/kernels/cuda/kv_cache_math_test.cpp checks them on the CPU (every code, ties, saturation, NaN) against
// kernels/dtype's conversions and a brute-force nearest code.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cuda/host_device.hpp"

namespace actorllm::cuda {

/// What a GPU KV cache stores: f32, the 16-bit float types, or fp8 e4m3 codes of x / scale (one scale per layer's
/// k and per its v: vLLM's k_scale and v_scale).
enum class kv_element : uint8_t { f32, f16, bf16, fp8_e4m3 };

/// Bytes per element.
ACTORLLM_HOST_DEVICE constexpr int kv_element_size(kv_element t) {
  return t == kv_element::f32 ? 4 : (t == kv_element::fp8_e4m3 ? 1 : 2);
}

/// One fp8 e4m3 cache element (a distinct type, so that the kernels' templates tell it from an integer).
struct fp8_e4m3_code {
  uint8_t bits;
};

namespace kvq {

using cuda::bits_float;
using cuda::float_bits;

/// The largest finite e4m3 value (code 0x7e).
constexpr float fp8_e4m3_max = 448.0f;

/// The value of an e4m3 code (OCP "e4m3fn": bias 7, subnormals, no infinities, 0x7f and 0xff NaN). Exact.
ACTORLLM_HOST_DEVICE inline float fp8_e4m3_decode(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  if (exp == 0xfu && mant == 0x7u)
    return bits_float(sign | 0x7fc00000u);
  if (exp == 0)  // subnormal: mant x 2^-9 (exact in f32), with the sign
    return bits_float(sign | float_bits(static_cast<float>(mant) * 0.001953125f));
  return bits_float(sign | ((exp + 120u) << 23) | (mant << 20));
}

/// The e4m3 code nearest x, ties to the even code; magnitudes beyond 448 (infinities too) saturate to +-448, as
/// vLLM clamps before converting; NaN gives 0x7f. Integer arithmetic only, so host and device agree bit for bit.
ACTORLLM_HOST_DEVICE inline uint8_t fp8_e4m3_encode(float x) {
  const uint32_t u = float_bits(x);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return 0x7f;
  if (a >= 0x43e00000u)  // >= 448
    return static_cast<uint8_t>(sign | 0x7eu);
  const int e = static_cast<int>(a >> 23) - 127;
  if (e >= -6) {  // an e4m3 normal: keep 3 of the 23 mantissa bits, round the 20 below to nearest even
    const uint32_t m = a & 0x7fffffu;
    uint32_t code = (static_cast<uint32_t>(e + 7) << 3) | (m >> 20);
    const uint32_t rest = m & 0xfffffu;
    if (rest > 0x80000u || (rest == 0x80000u && (code & 1u) != 0))
      ++code;  // may carry into the exponent: still the nearest; below 448 it never reaches 0x7f
    return static_cast<uint8_t>(sign | code);
  }
  if (a < 0x00800000u)  // zero or an f32 subnormal: far below half the smallest e4m3 subnormal (2^-10)
    return sign;
  // An e4m3 subnormal (or the smallest normal, code 8, by carry): x / 2^-9 rounded to nearest even.
  const uint32_t full = (a & 0x7fffffu) | 0x800000u;  // x = full x 2^(e - 23)
  const int shift = 14 - e;                           // x / 2^-9 = full >> shift, shift >= 21
  if (shift >= 32)
    return sign;
  uint32_t q = full >> shift;
  const uint32_t rest = full & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u) != 0))
    ++q;
  return static_cast<uint8_t>(sign | q);
}

/// The cache's code for x under a per-tensor scale: x / scale rounded (vLLM's scaled conversion).
ACTORLLM_HOST_DEVICE inline uint8_t fp8_quantize(float x, float scale) { return fp8_e4m3_encode(x / scale); }

/// The value a cache code stands for under its scale.
ACTORLLM_HOST_DEVICE inline float fp8_dequantize(uint8_t code, float scale) { return fp8_e4m3_decode(code) * scale; }

}  // namespace kvq
}  // namespace actorllm::cuda
