// --kv-cache-dtype's names and the element types each device stores.
#include "kernels/kv_cache_dtype.hpp"

#include <fmt/format.h>

namespace actorllm {

std::optional<kv_cache_dtype_choice> parse_kv_cache_dtype(std::string_view text, std::string& error) {
  if (text == "auto")
    return kv_cache_dtype_choice{};
  if (text == "bfloat16")
    return kv_cache_dtype_choice{false, dtype::bf16};
  if (text == "float16" || text == "half")
    return kv_cache_dtype_choice{false, dtype::f16};
  if (text == "float32")
    return kv_cache_dtype_choice{false, dtype::f32};
  if (text == "fp8" || text == "fp8_e4m3")
    return kv_cache_dtype_choice{false, dtype::fp8_e4m3};
  if (text == "fp8_e5m2" || text == "fp8_inc" || text == "fp8_ds_mla")
    error = fmt::format(
        "--kv-cache-dtype: '{}' is not implemented (fp8 here is e4m3 with a per-tensor scale: fp8 or "
        "fp8_e4m3); accepted: {}",
        text, kv_cache_dtype_values);
  else
    error = fmt::format("--kv-cache-dtype: '{}' is not one of {}", text, kv_cache_dtype_values);
  return std::nullopt;
}

dtype resolve_kv_cache_dtype(const kv_cache_dtype_choice& choice, dtype model_dtype) {
  if (!choice.follows_model)
    return choice.type;
  return is_float_dtype(model_dtype) ? model_dtype : dtype::f32;
}

std::string kv_cache_dtype_unsupported(dtype type, device_kind kind) {
  if (type == dtype::f32 || type == dtype::bf16 || type == dtype::f16)
    return {};
  if (type == dtype::fp8_e4m3 && kind == device_kind::cuda)
    return {};
  if (type == dtype::fp8_e4m3)
    return fmt::format(
        "--kv-cache-dtype fp8: the {} backend has no fp8 KV cache (fp8 e4m3 is GPU only); use auto, "
        "bfloat16 or float16",
        device_kind_name(kind));
  return fmt::format("--kv-cache-dtype: a KV cache cannot hold {} elements", dtype_name(type));
}

std::string_view kv_cache_dtype_name(dtype type) {
  switch (type) {
    case dtype::bf16:
      return "bfloat16";
    case dtype::f16:
      return "float16";
    case dtype::f32:
      return "float32";
    case dtype::fp8_e4m3:
      return "fp8_e4m3";
    case dtype::i32:
    case dtype::i64:
      break;
  }
  return dtype_name(type);
}

}  // namespace actorllm
