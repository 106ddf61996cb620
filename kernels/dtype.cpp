// Element types and scalar conversions.
#include "kernels/dtype.hpp"

#include <cmath>
#include <limits>

namespace actorllm {

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

float fp8_e4m3_to_f32(uint8_t v) {
  const float sign = (v & 0x80u) != 0 ? -1.0f : 1.0f;
  const int exp = (v >> 3) & 0xf;
  const int mant = v & 0x7;
  if (exp == 0xf && mant == 0x7)
    return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0)
    return sign * std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant / 8 * 2^-6
  return sign * std::ldexp(static_cast<float>(8 + mant), exp - 10);
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f))
    return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 448.0)
    return static_cast<uint8_t>(sign | 0x7e);
  if (a < std::ldexp(1.0, -6)) {  // subnormal (or zero): steps of 2^-9; 8 steps is the smallest normal
    const auto m = static_cast<int>(std::nearbyint(a * 512.0));
    return static_cast<uint8_t>(sign | (m >= 8 ? 0x08 : m));
  }
  int e = std::ilogb(a);                                                   // 2^e <= a < 2^(e+1), -6 <= e <= 8
  auto m = static_cast<int>(std::nearbyint(std::ldexp(a, -e) * 8.0)) - 8;  // 0..8
  if (m == 8) {
    m = 0;
    ++e;
  }
  if (e > 8 || (e == 8 && m == 7))  // rounded past 448
    return static_cast<uint8_t>(sign | 0x7e);
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | m);
}

}  // namespace actorllm
