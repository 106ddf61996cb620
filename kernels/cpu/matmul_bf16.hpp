// bf16 weights times activations rounded to bf16, on AVX512-BF16 dot products (vdpbf16ps): the CPU backend's fast
// path for bf16 models. Internal to kernels/cpu; callers go through kernels/cpu/matmul.hpp.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/matmul.hpp"
#include "util/thread_pool.hpp"

namespace actorllm::cpu {

/// Whether this build has the vdpbf16ps kernels (compiled for a CPU with AVX512-BF16).
bool have_bf16_dot_kernels();

/// Runs `targets` (all bf16) over one input in one parallel region, each y = x w^T (+ bias) with x rounded to bf16
/// once. `gated`: exactly two targets (gate, up) of equal n_out; targets[0].y receives silu(gate) * up and
/// targets[1].y is scratch. Requires have_bf16_dot_kernels().
void matmul_bf16_dot(const float* x, int64_t n_tokens, int64_t n_in, std::span<const matmul_target> targets, bool gated,
                     thread_pool& pool, matmul_path path);

}  // namespace actorllm::cpu
