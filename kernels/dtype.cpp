// Element types and scalar conversions.
#include "kernels/dtype.hpp"

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

}  // namespace actorllm
