// Device-side reads and writes of KV-cache elements of every kv_element type (f32, f16, bf16, fp8 e4m3 with its
// scale), and the host dispatch from kv_element to the C++ type the kernels are instantiated with. The fp8 math is
// kv_cache_math.hpp's, tested on the CPU.
#pragma once

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/kv_cache_math.hpp"

#include <stdexcept>
#include <type_traits>

namespace actorllm::cuda {

/// True for the fp8 cache element, whose values carry a per-tensor scale.
template <class T>
inline constexpr bool is_fp8_kv = std::is_same_v<T, fp8_e4m3_code>;

/// A cache element as f32: exact for f32, f16 and bf16; an fp8 code's e4m3 value (the caller applies the scale).
__device__ __forceinline__ float kv_to_f32(float v) { return v; }
__device__ __forceinline__ float kv_to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float kv_to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float kv_to_f32(fp8_e4m3_code v) { return kvq::fp8_e4m3_decode(v.bits); }

/// x as a cache element: rounded to nearest even (f16, bf16), or fp8's code of x / scale.
template <class T>
__device__ __forceinline__ T kv_from_f32(float x, float scale) {
  if constexpr (is_fp8_kv<T>)
    return fp8_e4m3_code{kvq::fp8_quantize(x, scale)};
  else
    return from_f32<T>(x);
}

/// Calls f with a null pointer of the C++ type of a cache element of type `t`: the launchers pick the kernel
/// instantiation with it.
template <class F>
void dispatch_kv_element(kv_element t, F&& f) {
  switch (t) {
    case kv_element::f32:
      f(static_cast<const float*>(nullptr));
      return;
    case kv_element::f16:
      f(static_cast<const __half*>(nullptr));
      return;
    case kv_element::bf16:
      f(static_cast<const __nv_bfloat16*>(nullptr));
      return;
    case kv_element::fp8_e4m3:
      f(static_cast<const fp8_e4m3_code*>(nullptr));
      return;
  }
  throw std::invalid_argument("dispatch_kv_element: not a KV cache element type");
}

}  // namespace actorllm::cuda
