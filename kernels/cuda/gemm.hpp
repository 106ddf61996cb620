// The Linear layers' GEMM through cuBLAS: y[t, o] = sum_i x[t, i] * w[o, i] with row-major x [n_tokens, n_in], the
// Hugging Face weight layout w [n_out, n_in] and y [n_tokens, n_out], f32 accumulation. The argument derivation is
// plain host code (unit-tested without a GPU).
#pragma once

#include "kernels/cuda/element_type.hpp"

#include <cublas_v2.h>

#include <cstdint>

namespace actorllm::cuda {

/// cuBLAS's column-major view of the row-major Linear: C (m x n) = op(A) (m x k) * op(B) (k x n).
struct gemm_args {
  bool transpose_a = false;  ///< op(A) = A^T
  bool transpose_b = false;
  int m = 0, n = 0, k = 0;
  int lda = 0, ldb = 0, ldc = 0;
};

/// The row-major y = x w^T as cuBLAS arguments: A = w read column-major (n_in x n_out) and transposed, B = x read
/// column-major (n_in x n_tokens), C = y read column-major (n_out x n_tokens): the "TN" layout, m = n_out,
/// n = n_tokens, k = n_in. Throws std::invalid_argument when a dimension is negative or beyond cuBLAS's int.
gemm_args linear_gemm_args(int64_t n_tokens, int64_t n_in, int64_t n_out);

/// linear_gemm_args for n_rows consecutive rows of a weight of y_width outputs, whose products are the columns
/// [first, first + n_rows) of y [n_tokens, y_width] when C starts at y + first: m = n_rows, ldc = y_width (the
/// prefill of a quantized weight, dequantized a chunk of rows at a time). n_rows <= y_width.
gemm_args linear_rows_gemm_args(int64_t n_tokens, int64_t n_in, int64_t n_rows, int64_t y_width);

/// Runs the GEMM on `handle`'s stream: y = x w^T. w and x are both of `type` (x already converted for f16/bf16);
/// y is f32. f32 runs SGEMM in cuBLAS's default math mode (no TF32, so it matches the CPU closely); f16/bf16 run
/// cublasGemmEx with f32 compute. Throws cuda_error on a cuBLAS failure.
void linear(cublasHandle_t handle, const gemm_args& args, const void* w, const void* x, element_type type, float* y);

/// "CUBLAS_STATUS_..." for a status.
const char* cublas_status_name(cublasStatus_t status);

}  // namespace actorllm::cuda
