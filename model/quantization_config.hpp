// The `quantization_config` of a Hugging Face config.json (and the `--quantization` flag): which quantized
// checkpoint format the weights are in, with the settings that change how they are read. Everything a format may
// say that the loader does not implement is refused here, naming the field, before any weight is read.
#pragma once

#include "kernels/quantized_linear.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::model {

/// The checkpoint formats that exist, by vLLM's quant_method names.
enum class quant_method : uint8_t {
  none,                ///< float weights
  fp8,                 ///< vLLM's fp8: F8_E4M3 weights with a per-tensor (or 128x128 block) weight_scale
  awq,                 ///< AutoAWQ GEMM: 4-bit, qweight/qzeros/scales packed along the output dimension
  gptq,                ///< GPTQ (AutoGPTQ / Optimum): 4 or 8 bits, packed along the input dimension, g_idx
  compressed_tensors,  ///< llm-compressor's compressed-tensors: pack-quantized, int-quantized, float-quantized
};

/// compressed-tensors' "format" values that exist here.
enum class ct_format : uint8_t {
  pack_quantized,   ///< int4/int8 codes packed in int32 along the input dimension (weight_packed, weight_scale)
  int_quantized,    ///< int8 weights stored as I8 (weight, weight_scale), W8A8 or W8A16
  naive_quantized,  ///< as int_quantized (the older name of the same layout)
  float_quantized,  ///< F8_E4M3 weights (weight, weight_scale)
};

/// A parsed quantization_config.
struct quantization_config {
  quant_method method = quant_method::none;
  /// `--quantization fp8` on a float checkpoint: Linear weights quantized to fp8 with per-channel scales at load.
  bool quantize_at_load = false;
  ct_format format = ct_format::pack_quantized;  ///< compressed_tensors only
  int bits = 0;                                  ///< integer formats: 4 or 8
  int64_t group_size = 0;                        ///< input columns per scale; 0: one per output channel
  bool symmetric = true;                         ///< integer formats: no zero points stored
  bool gptq_zero_offset = true;  ///< GPTQ v1 ("gptq") stores each zero point minus 1; "gptq_v2" does not
  /// fp8: the block of the block-wise weight_scale_inv ({0, 0}: per tensor or per channel).
  int64_t block_out = 0, block_in = 0;
  /// How the activations are quantized at run time (W8A8 int8 per token). fp8's activation schemes are not
  /// modelled: fp8 weights run weight-only (vLLM's Marlin path on GPUs without fp8 units).
  activation_quant activations = activation_quant::none;
  /// Module names (or "re:" patterns) the format leaves in float (informational: a float tensor in the checkpoint
  /// is read as one wherever it is).
  std::vector<std::string> ignore;

  bool quantized() const { return method != quant_method::none; }
  /// "awq int4 g128", "gptq int8 per-channel sym", "compressed-tensors int-quantized int8 W8A8", "fp8 (at load)".
  std::string describe() const;
};

/// vLLM's name of `m`: "none", "fp8", "awq", "gptq", "compressed-tensors".
std::string_view quant_method_name(quant_method m);

/// Parses the JSON object of config.json's quantization_config (`json` is its text; `origin` names the file in
/// errors, which name the field too). Throws model_error for an unknown quant_method (naming the supported ones)
/// and for every setting that changes the math and is not implemented (act-order, GPTQ 2/3-bit, AWQ without zero
/// points, more than one compressed-tensors config group, static int8 activations, sparsity, a KV-cache scheme...).
quantization_config parse_quantization_config(std::string_view json, std::string_view origin);

/// Applies the `--quantization` flag to the checkpoint's config: nullopt or "none"-less absent flag keeps `found`;
/// a method matching the checkpoint's (vLLM's aliases included: awq_marlin, gptq_marlin) keeps it; "fp8" on a float
/// checkpoint quantizes at load; anything else is a model_error naming both and the supported values.
quantization_config resolve_quantization(const quantization_config& found, const std::optional<std::string>& flag);

}  // namespace actorllm::model
