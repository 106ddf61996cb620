// Matrix multiplication against quantized Linear weights (kernels/quantized_linear.hpp) on the CPU: the weight held
// as 4- or 8-bit codes in the kernels' order (quantized_panels, tensor_layout::cpu_q4 / cpu_q8), the product
// y = x w^T (+ bias) for weight-only formats (integer codes against x on a 16-bit fixed-point grid, see
// quantize_row_int16) and for W8A8 (x quantized per token to int8, integer dot products). AVX-512 kernels (VNNI)
// where the build has them, a scalar path of the same math everywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "kernels/cpu/matmul.hpp"
#include "kernels/quantized_linear.hpp"
#include "kernels/tensor.hpp"
#include "util/thread_pool.hpp"

namespace actorllm::cpu {

/// The version of quantized_panels' layout: a packed-weight cache entry of another version is never used.
inline constexpr uint32_t quantized_panels_format = 1;

/// A quantized Linear weight [n_out, n_in] laid out for the kernels, in host memory on huge pages (each decode step
/// streams it). Made by pack_quantized; immutable afterwards. The buffer of a tensor_layout::cpu_q4 / cpu_q8 tensor.
///
/// Weight-only (activations none): rows padded to k_pad, a multiple of 128 inputs (zero codes past n_in), in blocks
/// of 128 inputs, laid out so that a 64-byte load turns into 16-bit lanes of 32 consecutive inputs with one shift
/// and one mask each. A 4-bit block is 64 bytes read as 32 little-endian 16-bit words: word m holds the codes of
/// inputs m, 32 + m, 64 + m, 96 + m of the block in its nibbles 0..3 (lowest first). An 8-bit block is two 64-byte
/// halves of 64 inputs each: word m of a half holds the codes of its inputs m (low byte) and 32 + m (high byte).
/// Then the scales (f32 [n_out, n_groups]) and zero points (u8 [n_out, n_groups]).
///
/// W8A8 (int8_per_token): rows of signed codes (code - 128), padded with zeros to k_pad, a multiple of 64; then the
/// scales (f32 [n_out, n_groups]) and, per group, 128 times the sum of its signed codes (i32 [n_out, n_groups]),
/// which removes the +128 that makes the activations unsigned for vpdpbusd.
class quantized_panels final : public buffer {
 public:
  /// Lays out w (validated first; std::invalid_argument when it is not valid) on the pool, in memory of its own.
  quantized_panels(const quantized_linear& w, thread_pool& pool);
  /// The layout of a weight shaped as `header` (bits, sizes, group size, activations; its codes are not read) over
  /// `storage`, which holds what pack() wrote for such a weight (a packed-weight cache entry, mapped).
  quantized_panels(const quantized_linear& header, std::shared_ptr<buffer> storage);

  /// Bytes of storage the layout of a weight shaped as `header` takes (the panels and 64 zero bytes after them).
  static size_t storage_bytes(const quantized_linear& header);
  /// Writes the layout of w (valid: quantized_linear::validate) into `storage` (storage_bytes(w), any alignment the
  /// caller likes; huge pages suit it) on the pool.
  static void pack(const quantized_linear& w, thread_pool& pool, void* storage);

  void* data() override { return mem_->data(); }
  /// The real size of the panels: codes, scales, zero points or code sums (not the logical bf16 size).
  size_t size() const override { return bytes_; }
  device where() const override { return device{}; }

  int bits() const { return bits_; }
  int64_t n_out() const { return n_out_; }
  int64_t n_in() const { return n_in_; }
  int64_t group_size() const { return group_size_; }
  int64_t n_groups() const { return n_in_ / group_size_; }
  activation_quant activations() const { return activations_; }
  /// Inputs per row as laid out (n_in rounded up to 128, or to 64 for W8A8).
  int64_t k_pad() const { return k_pad_; }
  /// Bytes from one row's codes to the next one's.
  size_t row_bytes() const { return row_bytes_; }
  /// tensor_layout::cpu_q4 or cpu_q8.
  tensor_layout layout() const { return bits_ == 4 ? tensor_layout::cpu_q4 : tensor_layout::cpu_q8; }

  /// Row o's codes in the layout above.
  const uint8_t* row_codes(int64_t o) const { return base() + static_cast<size_t>(o) * row_bytes_; }
  /// Row o's n_groups scales.
  const float* row_scales(int64_t o) const {
    return reinterpret_cast<const float*>(base() + scales_at_) + o * n_groups();
  }
  /// Row o's n_groups zero points (weight-only).
  const uint8_t* row_zeros(int64_t o) const { return base() + extra_at_ + static_cast<size_t>(o * n_groups()); }
  /// Row o's n_groups values 128 * sum of the group's signed codes (W8A8).
  const int32_t* row_code_sums(int64_t o) const {
    return reinterpret_cast<const int32_t*>(base() + extra_at_) + o * n_groups();
  }
  /// The code of w[o, i] (0 .. 2^bits - 1), read back from the layout.
  int code(int64_t o, int64_t i) const;

 private:
  explicit quantized_panels(const quantized_linear& header);  // the geometry only
  size_t storage_bytes() const { return bytes_ + 64; }
  void pack_into(const quantized_linear& w, thread_pool& pool, uint8_t* out) const;
  const uint8_t* base() const { return static_cast<const uint8_t*>(mem_->data()); }
  uint8_t* base() { return static_cast<uint8_t*>(mem_->data()); }

  int bits_;
  int64_t n_out_, n_in_, group_size_;
  activation_quant activations_;
  int64_t k_pad_;
  size_t row_bytes_;
  size_t scales_at_, extra_at_;  // byte offsets of the scales and of the zero points or code sums
  size_t bytes_;
  std::shared_ptr<buffer> mem_;  // host memory of its own, or a mapped cache entry
};

/// A quantized_panels of w, as cpu_backend::import_quantized_linear keeps it.
std::shared_ptr<quantized_panels> pack_quantized(const quantized_linear& w, thread_pool& pool);

/// One weight of a group sharing an input: y = x w^T (+ bias). bias: f32 [n_out] or null; y: f32 [n_tokens, n_out].
struct quantized_target {
  const quantized_panels* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
};

/// The kernels quantized weights run on. `best`: the AVX-512 kernels (vpdpwssd, vpdpbusd) where this build has
/// them, else `scalar`: the portable loops of the same math. Process-wide; for tests and benchmarks.
enum class quantized_kernels : uint8_t { best, scalar };
void set_quantized_kernels(quantized_kernels k);
quantized_kernels get_quantized_kernels();
/// Whether this build has the AVX-512 kernels (AVX512-BW, AVX512-VNNI and, for the prefill tiles, AVX512-BF16).
bool have_quantized_avx512_kernels();
/// Whether the AVX-512 kernels take a weight of this format: weight-only with groups a multiple of 32 inputs or one
/// group per row; W8A8 with groups a multiple of 64 or one group per row. Others run on the scalar path.
bool quantized_vector_format(activation_quant a, int64_t n_in, int64_t group_size);

/// y = x w^T (+ bias) for every target over the same x (f32 [n_tokens, n_in], apart from every y), in one parallel
/// region: the input is prepared once for all targets. Each target's weight is [n_out, n_in]; up to 8 targets.
///
/// Weight-only, decode sizes (GEMV: fewer than matmul_gemm_min_tokens tokens, or matmul_path::gemv): each token row
/// goes on a 16-bit fixed-point grid per block of 128 inputs (quantize_row_int16), so that the dot products with the
/// codes are exact integers (vpdpwssd); y[t, o] = sum over groups g of scale[o, g] * (sum over the group's blocks b
/// of step[t, b] * sum_{i in g, b} q[t, i] * code[o, i]) - sum over g of scale[o, g] * zero[o, g] * sum_{i in g}
/// xhat[t, i], with xhat = step * q, in f32. Prefill sizes (GEMM): rows dequantized to bf16 ((code - zero) * scale,
/// rounded once, as dequantize_to_bf16) times x rounded to bf16, on the bf16 panel tiles: the same results as the
/// bf16 weight of dequantize_to_bf16 on its packed path (the AVX-512 kernels; the scalar path takes the grid math at
/// every size).
///
/// W8A8: see quantize_row_int8 and w8a8_combine; integer sums are exact, the float steps those of w8a8_combine.
void matmul_quantized(const float* x, int64_t n_tokens, int64_t n_in, std::span<const quantized_target> targets,
                      thread_pool& pool, matmul_path path = matmul_path::automatic);

/// The SwiGLU up-projection over quantized gate and up weights ([n_ff, n_in] each, of one format): out =
/// silu(x gate^T) * (x up^T); up_scratch: f32 [n_tokens, n_ff], overwritten. Gate and up rows of the same outputs are
/// computed side by side in one parallel region.
void matmul_quantized_silu_gate(const float* x, int64_t n_tokens, int64_t n_in, const quantized_panels& gate,
                                const quantized_panels& up, float* up_scratch, float* out, thread_pool& pool,
                                matmul_path path = matmul_path::automatic);

/// Inputs per block of the weight-only activation grid.
inline constexpr int64_t activation_block = 128;

/// The weight-only kernels' activations: x [n] in blocks of activation_block inputs (the last one may be shorter),
/// each on the grid of a power-of-two step: step[b] = 2^(E - 15) where 2^(E - 1) <= max |x| over the block < 2^E, and
/// q[i] = x[i] / step rounded to nearest even, saturated to int16. So every value keeps 15 bits relative to its
/// block's largest (at least bf16's precision for every value within 2^6 of it). A block whose
/// largest |x| is below 2^-100 (zeros included) gets step 1 and zero codes; one with a non-finite value gets step NaN
/// (the outputs become NaN, as a float product would). steps: ceil(n / activation_block) values.
void quantize_row_int16(const float* x, int64_t n, int16_t* q, float* steps);

/// W8A8's dynamic per-token activation quantization, as vLLM's dynamic_scaled_int8_quant: absmax = max |x[i]| (NaN
/// ignored), returns scale = absmax / 127 and writes q[i] = x[i] * (127 / absmax) rounded to nearest even and
/// saturated to [-128, 127] (NaN to 0, as CUDA's cvt.rni.sat). A row of zeros gives scale 0 and zero codes.
float quantize_row_int8(const float* x, int64_t n, int8_t* q);

/// The W8A8 output for one token row and one weight row, the float steps every kernel takes: acc = 0; per group g
/// in order acc = fma(scale_w[g], float(isum[g]), acc), isum[g] the exact integer dot of the group's int8
/// activations and signed codes; y = fma(scale_x, acc, bias).
float w8a8_combine(const int32_t* isums, const float* scales_w, int64_t n_groups, float scale_x, float bias);

}  // namespace actorllm::cpu
