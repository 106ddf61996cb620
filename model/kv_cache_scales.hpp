// The per-layer k and v scales an fp8 KV cache reads from a checkpoint (vLLM's k_scale / v_scale, as FP8 checkpoints
// with a quantized KV cache carry them), 1 where the checkpoint gives none.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace actorllm::model {

/// One layer's KV cache scales.
struct kv_scales {
  float k = 1.0f;
  float v = 1.0f;
};

/// The scales of layers [layer_begin, layer_end) from the checkpoint in `dir`: for layer l, the scalar tensor
/// model.layers.l.self_attn.k_scale (or .self_attn.k_proj.k_scale) and v_scale (or .self_attn.v_proj.v_scale),
/// with vLLM's older single .self_attn.kv_scale for both; 1 where none is there. Throws model_error for a scale that
/// is not one positive finite F32/F16/BF16 value, naming the tensor.
std::vector<kv_scales> read_kv_cache_scales(const std::filesystem::path& dir, int64_t layer_begin, int64_t layer_end);

}  // namespace actorllm::model
