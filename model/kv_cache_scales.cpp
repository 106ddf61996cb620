// Reading an fp8 KV cache's scales from a checkpoint.
#include "model/kv_cache_scales.hpp"

#include "kernels/dtype.hpp"
#include "model/model_error.hpp"
#include "model/safetensors.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>

namespace actorllm::model {

namespace {

// The first of `names` the checkpoint holds, as one positive finite float.
std::optional<float> scalar(const safetensors_checkpoint& ckpt, std::initializer_list<std::string> names) {
  for (const std::string& name : names) {
    const auto e = ckpt.find(name);
    if (!e)
      continue;
    const tensor_info& info = *e->info;
    if (!info.is_float() || info.numel() != 1)
      throw model_error(fmt::format("{}: a KV cache scale must be one F32, F16 or BF16 value, got {} elements of {}",
                                    name, info.numel(), stored_type_name(info.stored)));
    alignas(8) std::byte raw[8]{};  // 8: load_as_f32 has an i64 case GCC cannot rule out
    std::memcpy(raw, e->file->data(info), dtype_size(info.type));
    const float v = load_as_f32(raw, info.type, 0);
    if (!(v > 0.0f) || !std::isfinite(v))
      throw model_error(fmt::format("{}: a KV cache scale must be positive and finite, got {}", name, v));
    return v;
  }
  return std::nullopt;
}

}  // namespace

std::vector<kv_scales> read_kv_cache_scales(const std::filesystem::path& dir, int64_t layer_begin, int64_t layer_end) {
  const safetensors_checkpoint ckpt = safetensors_checkpoint::open(dir);
  std::vector<kv_scales> out;
  for (int64_t l = layer_begin; l < layer_end; ++l) {
    const std::string attn = fmt::format("model.layers.{}.self_attn.", l);
    kv_scales s;
    const std::optional<float> both = scalar(ckpt, {attn + "kv_scale"});
    if (both)
      s.k = s.v = *both;
    if (auto k = scalar(ckpt, {attn + "k_scale", attn + "k_proj.k_scale"}))
      s.k = *k;
    if (auto v = scalar(ckpt, {attn + "v_scale", attn + "v_proj.v_scale"}))
      s.v = *v;
    out.push_back(s);
  }
  return out;
}

}  // namespace actorllm::model
