// RMSNorm and the residual add fused with it, on the GPU (device pointers, f32 activations, weights of any element
// type, the normalised output in f32 or bf16: the input of the bf16 GEMMs that read it). The semantics of
// kernels/cpu/rms_norm.hpp; sums of squares in f32 (the order of rms_norm_math.hpp).
#pragma once

#include "kernels/cuda/element_type.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight for n_rows rows of `width`; y of ytype (f32 or bf16: rounded once).
/// y may be x (f32 only).
void rms_norm(const float* x, int64_t n_rows, int64_t width, const void* weight, element_type wtype, float eps, void* y,
              element_type ytype, cudaStream_t stream);

/// residual += delta, then out = rms_norm(residual) (n_rows rows of `width`), out of out_type (f32 or bf16); out
/// overlaps neither input.
void add_rms_norm(float* residual, const float* delta, int64_t n_rows, int64_t width, const void* weight,
                  element_type wtype, float eps, void* out, element_type out_type, cudaStream_t stream);

}  // namespace actorllm::cuda
