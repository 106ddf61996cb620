// The CUDA backend's quantized Linear weight (tensor_layout::cuda_q4 / cuda_q8): the host side. Which formats it
// takes, the packing of a quantized_linear into the device image of quantized_gemv_math.hpp, the buffer a tensor of
// that layout holds (device memory plus the image's layout), and the launch plans of its GEMV and of the prefill's
// dequantization, as plain host code that the tests run without a GPU.
#pragma once

#include "kernels/cuda/quantized_gemv_math.hpp"
#include "kernels/quantized_linear.hpp"
#include "kernels/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace actorllm::cuda {

/// Whether the GEMV takes a weight-only weight of `bits` with this group size: 4 or 8 bits, and groups a multiple
/// of 16 inputs (a k-tile never spans two groups; 32, 64, 128 and per-channel rows of a multiple of 16 all are).
/// Other weights are dequantized to bf16 at import (backend::import_quantized_linear's default).
bool gemv_format_supported(int bits, int64_t n_in, int64_t group_size);

/// The image layout of w (gemv_format_supported must hold).
qgemv::gemv_layout gemv_layout_of(const quantized_linear& w);

/// w's device image, byte for byte (layout.total_bytes bytes), in the order of quantized_gemv_math.hpp.
std::vector<uint8_t> pack_for_gemv(const quantized_linear& w, const qgemv::gemv_layout& layout);

/// The buffer of a cuda_q4 / cuda_q8 tensor: the image in device memory (a block of the backend's pool) and its
/// layout. Immutable once made.
class quantized_weight final : public buffer {
 public:
  quantized_weight(std::shared_ptr<buffer> memory, const qgemv::gemv_layout& layout)
      : memory_(std::move(memory)), layout_(layout) {}

  void* data() override { return memory_->data(); }
  /// The image's bytes (codes, scales, zero points), not the logical bf16 size.
  size_t size() const override { return static_cast<size_t>(layout_.total_bytes); }
  device where() const override { return memory_->where(); }

  const qgemv::gemv_layout& layout() const { return layout_; }
  /// tensor_layout::cuda_q4 or cuda_q8.
  tensor_layout kind() const { return layout_.bits == 4 ? tensor_layout::cuda_q4 : tensor_layout::cuda_q8; }
  /// The image as the kernels take it (device pointers).
  qgemv::weight_view view() const;

 private:
  std::shared_ptr<buffer> memory_;
  qgemv::gemv_layout layout_;
};

/// The grid for a layout on a GPU of `sm_count` SMs. Each block reads its row tiles' codes once, its warps splitting
/// the chunks; two row tiles per block (their B fragments shared) only when that still leaves at least two blocks
/// per SM: the GEMV is bandwidth-bound, and a grid below two blocks per SM has too few loads in flight.
qgemv::gemv_launch plan_quantized_gemv(const qgemv::gemv_layout& layout, int sm_count);

/// Most bytes of the bf16 rows the prefill path dequantizes at once (cuBLAS then multiplies them): a fixed scratch
/// beside the weights, whatever the weight's size.
inline constexpr int64_t dequant_scratch_bytes = int64_t{32} << 20;

/// Rows dequantized per prefill GEMM: a multiple of 16 (whole row tiles) with at most dequant_scratch_bytes of
/// bf16, at least 16, at most n_out rounded up to 16.
int64_t dequant_chunk_rows(const qgemv::gemv_layout& layout);

}  // namespace actorllm::cuda
