// Element types of weights and activations, and the scalar conversions between them. Shared by every backend.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace actorllm {

/// Storage type of a tensor's elements: the float types of weights and activations, the integer types of a
/// step's inputs (token ids, positions, cache slots) as backend tensors hold them, and fp8_e4m3, which only a GPU KV
/// cache stores (--kv-cache-dtype fp8: codes times a per-tensor scale).
enum class dtype : uint8_t { f32, f16, bf16, i32, i64, fp8_e4m3 };

/// Bytes per element.
constexpr size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::fp8_e4m3:
      return 1;
    case dtype::f16:
    case dtype::bf16:
      return 2;
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::i64:
      return 8;
  }
  return 0;
}

/// True for the types weights and activations may have (f32, f16, bf16).
constexpr bool is_float_dtype(dtype t) { return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16; }

/// Short lowercase name: "f32", "f16", "bf16", "i32", "i64", "fp8_e4m3".
constexpr std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f32:
      return "f32";
    case dtype::f16:
      return "f16";
    case dtype::bf16:
      return "bf16";
    case dtype::i32:
      return "i32";
    case dtype::i64:
      return "i64";
    case dtype::fp8_e4m3:
      return "fp8_e4m3";
  }
  return "?";
}

/// Parses the float types only: safetensors ("F32", "F16", "BF16") and Hugging Face / torch spellings ("float32",
/// "float", "float16", "half", "bfloat16") and our own ("f32", "f16", "bf16"). Anything else is nullopt.
std::optional<dtype> parse_dtype(std::string_view s);

/// bf16 is the upper half of an IEEE f32.
inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

/// Round-to-nearest-even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// IEEE binary16 <-> binary32 (round-to-nearest-even), portable (no F16C needed).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

namespace detail {

// Every e4m3 code's value: (-1)^s * 2^(e-7) * (1 + m/8), subnormals (e = 0) 2^-6 * m/8, 0x7f/0xff NaN. Made at compile
// time from the bits of the float, so reading one is a load (converting an FP8 checkpoint reads billions).
constexpr std::array<float, 256> make_fp8_e4m3_table() {
  std::array<float, 256> t{};
  for (uint32_t v = 0; v < 256; ++v) {
    const uint32_t sign = (v & 0x80u) << 24, exp = (v >> 3) & 0xfu, mant = v & 0x7u;
    uint32_t bits = 0;
    if (exp == 0xf && mant == 0x7) {
      bits = sign | 0x7fc00000u;  // quiet NaN
    } else if (exp != 0) {
      bits = sign | ((exp - 7 + 127) << 23) | (mant << 20);
    } else if (mant != 0) {  // subnormal: mant * 2^-9, normalised for the float
      uint32_t m = mant, e = 127 - 9;
      while ((m & 0x8u) == 0) {  // shift the leading one to bit 3 (the implicit one at m = 8)
        m <<= 1;
        --e;
      }
      bits = sign | ((e + 3) << 23) | ((m & 0x7u) << 20);
    } else {
      bits = sign;  // +-0
    }
    t[v] = std::bit_cast<float>(bits);
  }
  return t;
}

inline constexpr std::array<float, 256> fp8_e4m3_table = make_fp8_e4m3_table();

}  // namespace detail

/// FP8 e4m3 ("e4m3fn", the OCP format of F8_E4M3 checkpoints): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits,
/// subnormals, no infinities, 0x7f / 0xff NaN, largest finite 448. Exact.
inline float fp8_e4m3_to_f32(uint8_t v) { return detail::fp8_e4m3_table[v]; }

/// The nearest e4m3 value (ties to even), saturated to +-448 (as vLLM clamps before converting); NaN gives 0x7f.
inline uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u)  // NaN
    return 0x7f;
  if (abs >= 0x43e00000u)  // 448 (the largest finite) and beyond, infinities too: saturated
    return static_cast<uint8_t>(sign | 0x7e);
  if (abs < 0x3c800000u) {  // below 2^-6, the smallest normal: steps of 2^-9, 8 of them the smallest normal
    // a * 512 is exact (a power of two); adding and taking away 2^23 rounds it to an integer, ties to even.
    const float steps = std::bit_cast<float>(abs) * 512.0f;
    const auto m = static_cast<uint32_t>((steps + 8388608.0f) - 8388608.0f);
    return static_cast<uint8_t>(sign | m);  // m == 8 is 0x08, the smallest normal
  }
  // Normal: keep 3 of the 23 mantissa bits, rounding the other 20 to nearest, ties to even; a carry moves into the
  // exponent, as it should. Below 448 nothing rounds past 448 (416 and 448 are neighbours).
  const uint32_t rounded = (abs + 0x7ffffu + ((abs >> 20) & 1u)) & ~0xfffffu;
  const uint32_t exp = (rounded >> 23) - 127 + 7, mant = (rounded >> 20) & 0x7u;
  return static_cast<uint8_t>(sign | (exp << 3) | mant);
}

/// The bf16 of each of n floats after an fp8 e4m3 round trip at `scale`: out[i] is
/// f32_to_bf16(fp8_e4m3_to_f32(f32_to_fp8_e4m3(w[i] / scale)) * scale), bit for bit, 16 at a time where the build has
/// AVX-512 (a weight quantized to fp8 at load, kept as bf16).
void fp8_e4m3_round_trip_to_bf16(const float* w, int64_t n, float scale, uint16_t* out);

/// Reads element `i` of a buffer of type `t` as float.
inline float load_as_f32(const void* data, dtype t, size_t i) {
  switch (t) {
    case dtype::f32:
      return static_cast<const float*>(data)[i];
    case dtype::f16:
      return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case dtype::bf16:
      return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case dtype::i32:
      return static_cast<float>(static_cast<const int32_t*>(data)[i]);
    case dtype::i64:
      return static_cast<float>(static_cast<const int64_t*>(data)[i]);
    case dtype::fp8_e4m3:
      return fp8_e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
  }
  return 0.0f;
}

/// Writes `v` as element `i` of a buffer of type `t`.
inline void store_from_f32(void* data, dtype t, size_t i, float v) {
  switch (t) {
    case dtype::f32:
      static_cast<float*>(data)[i] = v;
      break;
    case dtype::f16:
      static_cast<uint16_t*>(data)[i] = f32_to_f16(v);
      break;
    case dtype::bf16:
      static_cast<uint16_t*>(data)[i] = f32_to_bf16(v);
      break;
    case dtype::i32:
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
      break;
    case dtype::i64:
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v);
      break;
    case dtype::fp8_e4m3:
      static_cast<uint8_t*>(data)[i] = f32_to_fp8_e4m3(v);
      break;
  }
}

}  // namespace actorllm
