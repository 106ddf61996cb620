// Element types of weights and activations, and the scalar conversions between them. Shared by every backend.
#pragma once

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

/// FP8 e4m3 ("e4m3fn", the OCP format of F8_E4M3 checkpoints): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits,
/// subnormals, no infinities, 0x7f / 0xff NaN, largest finite 448. Exact.
float fp8_e4m3_to_f32(uint8_t v);
/// The nearest e4m3 value (ties to even), saturated to +-448 (as vLLM clamps before converting); NaN gives 0x7f.
uint8_t f32_to_fp8_e4m3(float f);

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
