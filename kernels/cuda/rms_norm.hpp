// RMSNorm and the residual add fused with it, on the GPU (device pointers, f32 activations, weights of any element
// type). The semantics of kernels/cpu/rms_norm.hpp; sums of squares in f32.
#pragma once

#include "kernels/cuda/element_type.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight for n_rows rows of `width`. y may be x.
void rms_norm(const float* x, int64_t n_rows, int64_t width, const void* weight, element_type wtype, float eps,
              float* y, cudaStream_t stream);

/// residual += delta, then out = rms_norm(residual) (n_rows rows of `width`); out overlaps neither input.
void add_rms_norm(float* residual, const float* delta, int64_t n_rows, int64_t width, const void* weight,
                  element_type wtype, float eps, float* out, cudaStream_t stream);

}  // namespace actorllm::cuda
