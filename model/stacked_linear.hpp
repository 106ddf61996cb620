// Linear layers that read the same input, stacked by output rows at load time (q|k|v_proj, gate|up_proj) so that one
// GEMM computes them all: one weight read, one launch, one input conversion. The Hugging Face checkpoint keeps them
// apart; bind_weights stacks each shard's slices (model/weight_table.hpp).
#pragma once

#include "kernels/quantized_linear.hpp"
#include "kernels/tensor.hpp"
#include "model/tensor.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace actorllm {
class backend;
}

namespace actorllm::model {

/// Up to three Linear weights of one input, as one: part i's outputs are the columns [offset(i), offset(i) +
/// rows[i]) of the stacked output. Where the parts cannot be stacked (stack_refusal), or the backend keeps them apart
/// (backend::stacks_linear_parts: the CPU without bf16 panels, whose stacked weight would be a copy of the parts),
/// `merged` is empty and `parts` holds each apart, run as one backend::matmul_group (or matmul_silu_gate) instead.
struct stacked_linear {
  static constexpr int max_parts = 3;

  tensor merged;  ///< [total_rows(), n_in] on the backend (its Linear layout), or empty
  tensor bias;    ///< f32 [total_rows()]: the parts' biases stacked, or empty (with `merged` only)
  std::array<tensor, max_parts> parts;        ///< each part's weight, when not stacked
  std::array<tensor, max_parts> part_biases;  ///< each part's bias (or empty), when not stacked
  std::array<int64_t, max_parts> rows{};      ///< output rows of each part on this shard
  int n_parts = 0;
  int64_t n_in = 0;

  bool empty() const { return n_parts == 0; }
  bool is_merged() const { return !merged.empty(); }
  /// The first output column of part i.
  int64_t offset(int i) const {
    int64_t o = 0;
    for (int p = 0; p < i; ++p)
      o += rows[static_cast<size_t>(p)];
    return o;
  }
  int64_t total_rows() const { return offset(n_parts); }
  /// The tensors that hold the weights (the stacked one, or each part), in output-row order: what expert-parallel
  /// load balancing moves as bytes.
  std::vector<tensor> weight_tensors() const;
};

/// One part of a stack as the loader gives it: a float slice or a quantized one (exactly one of them), and its bias.
struct stack_part {
  std::string name;  ///< the Hugging Face name (for messages)
  host_tensor* dense = nullptr;
  quantized_linear* quantized = nullptr;
  host_tensor* bias = nullptr;  ///< f32, or null
};

/// Why `parts` cannot be stacked into one weight (empty when they can): a mix of float and quantized parts, quantized
/// parts of different bits, group sizes or activation schemes, or different input widths. Float parts of different
/// dtypes can: they are stacked as f32.
std::string stack_refusal(const std::vector<stack_part>& parts);

/// The parts' slices stacked by rows into one host tensor (their common dtype, f32 if they differ).
host_tensor stack_dense_rows(const std::vector<stack_part>& parts);
/// The parts' quantized slices stacked by rows (codes, scales and zero points follow their rows: output channels
/// are independent in every supported format). The parts are moved from. When every part is still unread and named
/// by its origin (quantized_linear::unread, ::origin), so is the result: named by the parts' names in order, and read
/// (each part, then stacked) only when read() is called.
quantized_linear stack_quantized_rows(const std::vector<stack_part>& parts);

/// `q` on `be`: the layout the backend holds under q's origin where it has one (reading nothing of q's codes), else
/// q read (if still unread) and imported. Adds q's packed size to `bytes`.
tensor bind_quantized_linear(quantized_linear& q, backend& be, size_t& bytes);

/// The parts bound on `be` as one stacked_linear: stacked when stack_refusal allows and the backend wants them stacked
/// (backend::stacks_linear_parts, asked of dense Linear parts of one dtype), else apart. `linear` says whether
/// the weights go through import_linear_weight (false for experts moved as raw bytes). Adds the bytes bound to
/// `bytes`. The parts' host tensors are moved from.
stacked_linear bind_stacked_linear(std::vector<stack_part> parts, bool linear, backend& be, size_t& bytes);

}  // namespace actorllm::model
