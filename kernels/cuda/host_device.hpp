// ACTORLLM_HOST_DEVICE: `__host__ __device__` under nvcc, nothing in a host compiler, for the arithmetic the CUDA
// kernels share with their CPU tests (attention_math.hpp, sampling_math.hpp, custom_all_reduce_math.hpp,
// lora_math.hpp).
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define ACTORLLM_HOST_DEVICE __host__ __device__
#else
#define ACTORLLM_HOST_DEVICE
#endif

// ACTORLLM_UNROLL: `#pragma unroll` before a loop of a shared header, in nvcc's device pass only (__CUDA_ARCH__; the
// host compiler, in nvcc's host pass too, would warn about it).
#ifdef __CUDA_ARCH__
#define ACTORLLM_UNROLL _Pragma("unroll")
#else
#define ACTORLLM_UNROLL
#endif

namespace actorllm::cuda {

/// The bits of a float (the device's intrinsic, memcpy on the host).
ACTORLLM_HOST_DEVICE inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

/// The float of some bits.
ACTORLLM_HOST_DEVICE inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace actorllm::cuda
