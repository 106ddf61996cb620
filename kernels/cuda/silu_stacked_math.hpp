// The arithmetic of the CUDA silu_mul_stacked kernel (elementwise.cu) as a __host__ __device__ function: where output
// element i of a stacked gate|up projection finds its gate and its up, and the SiLU product in the CPU's order of
// operations. The kernel calls exactly this; tests/kernels/cuda/silu_stacked_math_test.cpp runs it on the CPU
// against the CPU backend. A C++17 header (nvcc compiles the .cu files as C++17).
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels/cuda/host_device.hpp"

namespace actorllm::cuda::silu_stacked {

/// out[i] of a [n_rows, n_ff] output over gate_up [n_rows, 2 * n_ff]: row r = i / n_ff, column j = i % n_ff, gate
/// gate_up[r, j], up gate_up[r, n_ff + j]; silu(g) * u = g * u / (1 + e^-g) (expf, not the fast __expf).
ACTORLLM_HOST_DEVICE inline float at(const float* gate_up, int64_t n_ff, int64_t i) {
  const int64_t r = i / n_ff, j = i % n_ff;
  const float g = gate_up[r * 2 * n_ff + j];
  const float u = gate_up[r * 2 * n_ff + n_ff + j];
  return g * u / (1.0f + expf(-g));
}

}  // namespace actorllm::cuda::silu_stacked
