// RMSNorm and SiLU×mul on the GPU.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/norm_activation.hpp"

#include <algorithm>

namespace actorllm::cuda {
namespace {

constexpr int k_norm_threads = 256;

// One block per row: a block-wide sum of squares (warp shuffles, then across warps in shared memory).
__global__ void rms_norm_kernel(const float* __restrict__ x, int64_t n_embd, const float* __restrict__ weight,
                                float eps, float* __restrict__ y) {
  const float* row = x + blockIdx.x * n_embd;
  float* out = y + blockIdx.x * n_embd;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x)
    sum += row[i] * row[i];
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ float warp_sums[k_norm_threads / 32];
  if (threadIdx.x % 32 == 0)
    warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    sum = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x == 0)
      warp_sums[0] = sum;
  }
  __syncthreads();
  const float inv = rsqrtf(warp_sums[0] / static_cast<float>(n_embd) + eps);
  for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x)
    out[i] = row[i] * inv * weight[i];
}

__global__ void silu_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up, int64_t n,
                                float* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float g = gate[i];
    out[i] = g / (1.0f + __expf(-g)) * up[i];
  }
}

}  // namespace

void rms_norm(const float* x, int64_t n_tokens, int64_t n_embd, const float* weight, float eps, float* y,
              cudaStream_t stream) {
  if (n_tokens == 0)
    return;
  rms_norm_kernel<<<static_cast<unsigned>(n_tokens), k_norm_threads, 0, stream>>>(x, n_embd, weight, eps, y);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0)
    return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
  silu_mul_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(gate, up, n, out);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace actorllm::cuda
