// Device-side helpers shared by the kernels: loading weights of any element type as f32, block and warp sums, and the
// dispatch from element_type to a C++ type for the host launchers.
#pragma once

#include "kernels/cuda/element_type.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>

namespace actorllm::cuda {

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

/// Sum over the 32 lanes of a warp; every lane gets the total.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Maximum over the 32 lanes of a warp; every lane gets it.
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Sum over the threads of a block (blockDim.x a multiple of 32, at most 1024); every thread gets the total. Uses 33
/// floats of shared memory; callable several times in a kernel (it synchronises before reusing them).
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[33];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // an earlier call's readers are done with partial
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < n_warps ? partial[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0)
      partial[32] = s;
  }
  __syncthreads();
  return partial[32];
}

/// Calls f with a null pointer of the C++ type of `t` (float, __half or __nv_bfloat16): host launchers pick the kernel
/// instantiation with it.
template <class F>
void dispatch_element(element_type t, F&& f) {
  switch (t) {
    case element_type::f32:
      f(static_cast<const float*>(nullptr));
      return;
    case element_type::f16:
      f(static_cast<const __half*>(nullptr));
      return;
    case element_type::bf16:
      f(static_cast<const __nv_bfloat16*>(nullptr));
      return;
  }
  throw std::invalid_argument("dispatch_element: not a floating-point element type");
}

}  // namespace actorllm::cuda
