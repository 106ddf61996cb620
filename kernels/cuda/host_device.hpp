// ACTORLLM_HOST_DEVICE: `__host__ __device__` under nvcc, nothing in a host compiler, for the arithmetic the CUDA
// kernels share with their CPU tests (attention_math.hpp, sampling_math.hpp, custom_all_reduce_math.hpp,
// lora_math.hpp).
#pragma once

#ifdef __CUDACC__
#define ACTORLLM_HOST_DEVICE __host__ __device__
#else
#define ACTORLLM_HOST_DEVICE
#endif

// ACTORLLM_UNROLL: `#pragma unroll` for nvcc before a loop of a shared header (host compilers would warn about it).
#ifdef __CUDACC__
#define ACTORLLM_UNROLL _Pragma("unroll")
#else
#define ACTORLLM_UNROLL
#endif
