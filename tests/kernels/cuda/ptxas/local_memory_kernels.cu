// Kernels that use local memory, for the test that the build's ptxas checks (ACTORLLM_CUDA_PTXAS_CHECKS) refuse
// them. Not part of any target: tests/CMakeLists.txt compiles each one alone (-DCASE=n) and expects failure.
#include <cstdint>

#if CASE == 1
// A per-thread array indexed at run time: a stack frame without a single spill.
__global__ void indexed_array(const float* in, const int32_t* index, float* out) {
  float table[32];
  for (int i = 0; i < 32; ++i)
    table[i] = in[i * 32 + threadIdx.x];
  for (int i = 0; i < 4; ++i)
    table[index[i * 32 + threadIdx.x] & 31] += 1.0f;
  out[threadIdx.x] = table[index[threadIdx.x] & 31];
}
#elif CASE == 2
// More live values than registers under a 64-register cap: spills.
__global__ void __launch_bounds__(1024, 1) many_live_values(const float* in, float* out) {
  float v[160];
#pragma unroll
  for (int i = 0; i < 160; ++i)
    v[i] = in[threadIdx.x + i * 1024];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 160; ++i)
    s += v[i] * v[(i * 7) % 160];
  out[threadIdx.x] = s;
}
#else
// No local memory: the control case, which must compile.
__global__ void plain(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x] * 2.0f; }
#endif
