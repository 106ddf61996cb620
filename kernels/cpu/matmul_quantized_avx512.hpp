// The AVX-512 kernels of quantized Linear weights (vpdpwssd and vpdpbusd for weight-only formats, vpdpbusd for W8A8).
// Internal to kernels/cpu; callers go through kernels/cpu/matmul_quantized.hpp, which picks these or the scalar path.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/matmul_quantized.hpp"
#include "util/thread_pool.hpp"

namespace actorllm::cpu {

/// Runs `targets` (all weight-only or all W8A8, every one in a quantized_vector_format) over one input in one
/// parallel region. `gated`: exactly two targets (gate, up) of one shape; targets[0].y receives silu(gate) * up and
/// targets[1].y is scratch. Requires have_quantized_avx512_kernels().
void matmul_quantized_avx512(const float* x, int64_t n_tokens, int64_t n_in, std::span<const quantized_target> targets,
                             bool gated, thread_pool& pool, matmul_path path);

/// The grid step of one block of weight-only activations (quantize_row_int16's rule) from its largest |x| and
/// whether all its values are finite, shared by both paths.
float activation_step(float absmax, bool finite);

/// Work units of `rows` outputs each, numbered across the targets one after another: target i owns units
/// [begin[i], begin[i + 1]). A gated group numbers its gate target only: a unit covers the same outputs of gate and
/// up. Shared by the scalar and the AVX-512 drivers.
struct quantized_units {
  int64_t begin[9] = {};
  size_t n_targets = 0;

  quantized_units(std::span<const quantized_target> targets, bool gated, int64_t rows)
      : n_targets(gated ? 1 : targets.size()) {
    for (size_t i = 0; i < n_targets; ++i)
      begin[i + 1] = begin[i] + (targets[i].w->n_out() + rows - 1) / rows;
  }
  int64_t total() const { return begin[n_targets]; }
  /// The target of unit u, searching on from target i (units are visited in increasing order).
  size_t target_of(int64_t u, size_t i) const {
    while (u >= begin[i + 1])
      ++i;
    return i;
  }
};

}  // namespace actorllm::cpu
