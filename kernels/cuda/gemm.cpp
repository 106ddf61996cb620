// cuBLAS calls of the Linear layers.
#include "kernels/cuda/gemm.hpp"

#include "kernels/cuda/cublas_library.hpp"

#include "kernels/cuda/cuda_check.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace actorllm::cuda {
namespace {

int checked_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string{"linear_gemm_args: "} + what + " = " + std::to_string(v) +
                                " is outside cuBLAS's int range [0, 2^31)");
  return static_cast<int>(v);
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(std::string{what} + " failed: " + cublas_status_name(status));
}

cudaDataType_t cuda_type(element_type t) {
  switch (t) {
    case element_type::f32:
      return CUDA_R_32F;
    case element_type::f16:
      return CUDA_R_16F;
    case element_type::bf16:
      return CUDA_R_16BF;
  }
  throw std::invalid_argument("linear: not a floating-point element type");
}

}  // namespace

gemm_args linear_gemm_args(int64_t n_tokens, int64_t n_in, int64_t n_out) {
  gemm_args a;
  a.transpose_a = true;
  a.transpose_b = false;
  a.m = checked_int(n_out, "n_out");
  a.n = checked_int(n_tokens, "n_tokens");
  a.k = checked_int(n_in, "n_in");
  // Leading dimensions must be at least 1 even for empty matrices.
  a.lda = a.k > 0 ? a.k : 1;
  a.ldb = a.k > 0 ? a.k : 1;
  a.ldc = a.m > 0 ? a.m : 1;
  return a;
}

gemm_args linear_rows_gemm_args(int64_t n_tokens, int64_t n_in, int64_t n_rows, int64_t y_width) {
  if (n_rows > y_width)
    throw std::invalid_argument("linear_rows_gemm_args: " + std::to_string(n_rows) + " rows of a weight of " +
                                std::to_string(y_width) + " outputs");
  gemm_args a = linear_gemm_args(n_tokens, n_in, n_rows);
  a.ldc = std::max(checked_int(y_width, "y_width"), 1);
  return a;
}

void linear(cublasHandle_t handle, const gemm_args& args, const void* w, const void* x, element_type type, float* y) {
  if (args.m == 0 || args.n == 0)
    return;
  const cublasOperation_t op_a = args.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = args.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float alpha = 1.0f, beta = 0.0f;
  if (type == element_type::f32) {
    check_cublas(cublas().sgemm(handle, op_a, op_b, args.m, args.n, args.k, &alpha, static_cast<const float*>(w),
                                args.lda, static_cast<const float*>(x), args.ldb, &beta, y, args.ldc),
                 "cublasSgemm");
    return;
  }
  check_cublas(cublas().gemm_ex(handle, op_a, op_b, args.m, args.n, args.k, &alpha, w, cuda_type(type), args.lda, x,
                                cuda_type(type), args.ldb, &beta, y, CUDA_R_32F, args.ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_(unknown)";
}

}  // namespace actorllm::cuda
