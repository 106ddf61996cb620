// RMSNorm (Llama's LlamaRMSNorm) over the embedding dimension.
#pragma once

#include <cstdint>

#include "kernels/dtype.hpp"

namespace actorllm::cpu {

/// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, per row of n_embd (n_tokens rows); weight has n_embd elements
/// of type `wtype`; y may alias x. The sum of squares is accumulated in f32 vector lanes and combined in double.
void rms_norm(const float* x, int64_t n_tokens, int64_t n_embd, const void* weight, dtype wtype, float eps, float* y);

}  // namespace actorllm::cpu
