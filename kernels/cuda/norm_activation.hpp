// The first CUDA kernels of the backend: RMSNorm and SiLU×mul over f32 device buffers. The full backend (GEMM,
// paged attention, sampling) follows the same pattern: a checked launcher per op, parity-tested against kernels/cpu.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace actorllm::cuda {

/// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight for each of n_tokens rows of n_embd (device pointers, f32).
void rms_norm(const float* x, int64_t n_tokens, int64_t n_embd, const float* weight, float eps, float* y,
              cudaStream_t stream = nullptr);

/// out[i] = silu(gate[i]) * up[i] (device pointers, f32).
void silu_mul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream = nullptr);

}  // namespace actorllm::cuda
