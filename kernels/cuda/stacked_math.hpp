// The arithmetic of the CUDA kernels over a stacked projection's output (elementwise.cu): silu_mul_stacked (where
// output element i finds its gate and its up, and the SiLU product in the CPU's order of operations) and
// split_columns (which part and which of its elements column c of a row is). The kernels call exactly these;
// tests/kernels/cuda/stacked_math_test.cpp runs them on the CPU against the CPU backend. A C++17 header (nvcc
// compiles the .cu files as C++17).
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

namespace actorllm::cuda::split {

/// Most parts one split_columns launch writes.
inline constexpr int max_parts = 4;

/// The parts of a split, passed to the kernel by value: part p takes `cols[p]` columns of each source row, after
/// those of the parts before it, into its own [n_rows, cols[p]] rows at `dst[p]`.
struct parts {
  float* dst[max_parts];
  int64_t cols[max_parts];
  int n = 0;
  int64_t total = 0;  ///< the parts' columns together: the elements of one row the kernel visits
};

/// Where element i (of n_rows * total, row-major over the parts' columns) of the source lands: part and index into
/// that part's rows. `src_width` is the source row's width (>= total).
struct target {
  int part;
  int64_t index;  ///< into parts::dst[part]
  int64_t src;    ///< into the source
};
ACTORLLM_HOST_DEVICE inline target locate(const parts& p, int64_t src_width, int64_t i) {
  const int64_t r = i / p.total;
  int64_t c = i % p.total;
  const int64_t src = r * src_width + c;
  // Unrolled with constant indexes only: an index computed at run time into the kernel's by-value parameter would
  // copy it to local memory, which the build refuses.
  int part = 0;
  int64_t cols = p.cols[0];
  ACTORLLM_UNROLL
  for (int k = 0; k + 1 < max_parts; ++k)
    if (part == k && k + 1 < p.n && c >= p.cols[k]) {
      c -= p.cols[k];
      part = k + 1;
      cols = p.cols[k + 1];
    }
  return {part, r * cols + c, src};
}

/// parts::dst[part], by constant indexes (see locate).
ACTORLLM_HOST_DEVICE inline float* destination(const parts& p, int part) {
  float* d = p.dst[0];
  ACTORLLM_UNROLL
  for (int k = 1; k < max_parts; ++k)
    if (part == k)
      d = p.dst[k];
  return d;
}

}  // namespace actorllm::cuda::split
