// Reading one shard's slice of a quantized Linear weight out of a checkpoint, in each format's own packing: AWQ
// (qweight/qzeros packed along the output dimension in AWQ's nibble order), GPTQ (packed along the input dimension,
// v1's zero offset, g_idx), compressed-tensors pack-quantized (weight_packed, weight_scale, weight_shape) and
// int-quantized (I8 weight, weight_scale), and FP8 (F8_E4M3 weight with a per-tensor, per-channel or block scale).
// Integer formats become the canonical quantized_linear (kernels/quantized_linear.hpp); FP8 weights are dequantized
// to bf16 (weight-only, as vLLM's Marlin path runs them on GPUs without fp8 units).
#pragma once

#include "model/model_weights.hpp"
#include "model/quantization_config.hpp"
#include "model/safetensors.hpp"
#include "model/weight_table.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::model {

/// How one declared Linear weight is stored in a checkpoint.
enum class linear_storage : uint8_t {
  float_weight,  ///< "<prefix>.weight" in F32/F16/BF16: the plain path
  awq,           ///< "<prefix>.qweight", ".qzeros", ".scales" under quant_method awq
  gptq,          ///< "<prefix>.qweight", ".qzeros", ".scales" (and ".g_idx") under quant_method gptq
  ct_packed,     ///< "<prefix>.weight_packed", ".weight_scale" (".weight_shape")
  int8_weight,   ///< "<prefix>.weight" in I8 with ".weight_scale"
  fp8_weight,    ///< "<prefix>.weight" in F8_E4M3 with ".weight_scale" or ".weight_scale_inv"
};

/// "float", "awq", "gptq", "compressed-tensors pack-quantized", "int8", "fp8".
std::string_view linear_storage_name(linear_storage s);

/// The checkpoint tensors that hold `decl` (a weight named "<prefix>.weight").
struct quantized_source {
  linear_storage storage = linear_storage::float_weight;
  std::string prefix;
  /// The checkpoint entries, by role: codes (qweight / weight_packed / weight), scales, zeros (qzeros), g_idx,
  /// shape (weight_shape). Absent roles have file == nullptr.
  safetensors_checkpoint::entry codes{}, scales{}, zeros{}, g_idx{}, shape{};
};

/// Finds how `decl` is stored in `ckpt` under `quant`, and checks every tensor of that storage against the declared
/// full shape [n_out, n_in] (dtypes, packed shapes, the group size, a trivial g_idx). Returns float_weight when the
/// checkpoint holds "<prefix>.weight" as a float tensor (a layer the format leaves unquantized) or nothing at all
/// for it (the caller reports missing weights). Throws model_error naming the tensor and what is wrong, and when the
/// checkpoint holds quantized tensors the config does not announce.
quantized_source find_quantized_source(const safetensors_checkpoint& ckpt, const weight_decl& decl,
                                       const quantization_config& quant);

/// The input-column group size of `src` for a weight of `n_in` columns (n_in when one group per channel).
int64_t source_group_size(const quantized_source& src, const quantization_config& quant, int64_t n_in);

/// Checks that every rank of `tp_size` splits `decl` along group boundaries (row-parallel weights split the
/// input columns, which must not cut a group); throws model_error naming the weight, the group size and the tensor
/// parallel sizes that work.
void check_group_split(const weight_decl& decl, int64_t group_size, int tp_size);

/// Reads rank `tp_rank`'s slice of an integer-format weight (awq, gptq, ct_packed, int8_weight) into the canonical
/// form: codes unpacked, zero points (v1 offset applied), scales as f32, `quant.activations` carried over.
quantized_linear read_quantized_slice(const quantized_source& src, const weight_decl& decl,
                                      const quantization_config& quant, int tp_rank, int tp_size);

/// Reads rank `tp_rank`'s slice of an fp8 weight, each element e4m3 times its scale, rounded to bf16 once.
host_tensor read_fp8_slice_as_bf16(const quantized_source& src, const weight_decl& decl,
                                   const quantization_config& quant, int tp_rank, int tp_size);

/// The per-channel fp8 scale of a row whose largest magnitude is `amax`: amax / 448 (e4m3's largest), 1 for a row
/// of zeros.
float fp8_channel_scale(float amax);
/// What quantize_fp8_slice_as_bf16 makes of a slice's bytes, as file_origin::transform names it ("FP8", version 1).
inline constexpr uint64_t fp8_at_load_transform = 0x465038'01;

/// `--quantization fp8` on a float weight: each output row (whole, whatever the slice, so every layout gets the same
/// scales) scaled to max |w| / 448, rounded to e4m3, and the slice's elements dequantized to bf16. `src` is the
/// float tensor "<prefix>.weight". Where the checkpoint is mapped, a host_tensor::deferred: quantized when first read,
/// and named by its place in the file with fp8_at_load_transform, so a backend that finds the result by that name
/// (the CPU's packed-weight cache) never quantizes it.
host_tensor quantize_fp8_slice_as_bf16(const safetensors_checkpoint::entry& src, const weight_decl& decl, int tp_rank,
                                       int tp_size);

}  // namespace actorllm::model
