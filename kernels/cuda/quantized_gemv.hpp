// Kernels over the CUDA backend's quantized Linear weights (quantized_gemv_math.hpp): the decode GEMV on the tensor
// cores and the dequantization to bf16 that the prefill path hands to cuBLAS.
#pragma once

#include "kernels/cuda/quantized_gemv_math.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]) for 1 <= n_tokens <= qgemv::max_tokens. x: f32 [n_tokens, n_in],
/// 16-byte aligned, converted to bf16 (round to nearest even) inside the kernel as it is read; the codes are read
/// once for all tokens (128-bit loads that bypass L1), each (code - zero) is exact in bf16, the products go through
/// mma.m16n8k16 with f32 accumulation, per group, then total = fma(scale, group sum, total) in f32. bias: f32
/// [n_out] or null. y: f32 [n_tokens, n_out]. `launch` from plan_quantized_gemv.
void quantized_gemv(const qgemv::weight_view& w, const qgemv::gemv_launch& launch, const float* x, int64_t n_tokens,
                    const float* bias, float* y, cudaStream_t stream);

/// Rows [row_begin, row_begin + n_rows) of the weight, dequantized: out[r, i] = bf16((code - zero) * scale) of row
/// row_begin + r (the f32 product rounded once, as dequantize_to_bf16). row_begin a multiple of 16; out: bf16
/// [n_rows, n_in], 4-byte aligned.
void dequantize_rows(const qgemv::weight_view& w, int64_t row_begin, int64_t n_rows, void* out, cudaStream_t stream);

}  // namespace actorllm::cuda
