// The GEMV of small batches over bf16 weights (M <= gemv::max_rows rows of x): y = x w^T read straight from the
// weights at close to copy bandwidth, in one launch for a group of weights over the same x (q/k/v) or for gate and up
// with their SiLU×mul. cuBLAS at these M picks split-K GEMMs plus a reduce kernel; this reads each weight once, 128
// bits per lane, for every row of x. Its arithmetic is kernels/cuda/gemv_math.hpp.
#pragma once

#include "kernels/cuda/gemv_math.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// The process's GEMV tuning (gemv::tuning): from the environment variable ACTORLLM_GEMV
/// ("loads=4,rows=1,elements=all") the first time it is asked for, else the defaults; bench_gpu sets it to compare
/// settings. A malformed ACTORLLM_GEMV throws std::invalid_argument naming it (cuda_backend asks at its construction,
/// so a bad value stops it there).
gemv::tuning& gemv_tuning();

/// One weight of a launch: w bf16 [n_out, n_in] (16-byte aligned), an optional f32 bias [n_out] and y f32 [rows,
/// n_out].
struct gemv_output {
  const void* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t n_out = 0;
};

/// y_i = x w_i^T (+ bias_i) for every output i < n_outputs (at most gemv::max_outputs), one launch. x: `rows` rows of
/// n_in, f32 (x_bf16 false) or bf16, 16-byte aligned; gemv::takes(rows, n_in, w, x) must hold for every weight.
void gemv_linear(const gemv_output* outputs, int n_outputs, const void* x, bool x_bf16, int64_t rows, int64_t n_in,
                 cudaStream_t stream);

/// out = silu(x w_gate^T) * (x w_up^T): w_gate and w_up bf16 [n_ff, n_in], out [rows, n_ff] f32 or (out_bf16) bf16
/// rounded once, one launch (no gate or up activations in memory). x as gemv_linear's.
void gemv_silu_gate(const void* w_gate, const void* w_up, int64_t n_ff, const void* x, bool x_bf16, int64_t rows,
                    int64_t n_in, void* out, bool out_bf16, cudaStream_t stream);

}  // namespace actorllm::cuda
