// Element-wise activations and residual adds of the transformer block.
#pragma once

#include <cstdint>

namespace actorllm::cpu {

/// out[i] = silu(gate[i]) * up[i] with silu(g) = g / (1 + e^-g) (Llama's SwiGLU MLP); out may alias gate or up.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

/// y[i] += x[i] (residual connection).
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace actorllm::cpu
