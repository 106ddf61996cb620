// --kv-cache-dtype: the element type a KV cache stores, by vLLM's names, and which devices store which. The model
// computes attention in f32 whatever the cache holds; the cache only changes how many bytes a token slot takes.
#pragma once

#include "kernels/device.hpp"
#include "kernels/dtype.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace actorllm {

/// What --kv-cache-dtype asked for: the model's dtype (auto), or one element type.
struct kv_cache_dtype_choice {
  bool follows_model = true;  ///< auto: the cache takes the model's dtype
  dtype type = dtype::f32;    ///< the element type when not auto

  friend bool operator==(const kv_cache_dtype_choice&, const kv_cache_dtype_choice&) = default;
};

/// The values --kv-cache-dtype takes, as they are spelled in its help and errors.
inline constexpr std::string_view kv_cache_dtype_values = "auto, bfloat16, float16, float32, fp8, fp8_e4m3";

/// Parses vLLM's spellings: auto, bfloat16, float16 (half), float32 (ours: an f32 cache under a bf16 model, for parity
/// runs), fp8 and fp8_e4m3 (the same: e4m3 codes with a per-tensor scale). vLLM's other fp8 formats (fp8_e5m2,
/// fp8_inc, fp8_ds_mla) are refused by name as not implemented, anything else as unknown: nullopt with `error` naming
/// the value and what is accepted.
std::optional<kv_cache_dtype_choice> parse_kv_cache_dtype(std::string_view text, std::string& error);

/// The element type of the cache: the choice's, or under auto the model's dtype (a float type; anything else, such
/// as a quantized model's storage, gives f32).
dtype resolve_kv_cache_dtype(const kv_cache_dtype_choice& choice, dtype model_dtype);

/// Empty when a backend on `kind` stores a KV cache of `type`; otherwise why not, naming --kv-cache-dtype and the
/// value. The CPU stores f32, bf16 and f16; CUDA also fp8 e4m3.
std::string kv_cache_dtype_unsupported(dtype type, device_kind kind);

/// vLLM's name of a cache element type ("bfloat16", "float16", "float32", "fp8_e4m3"), for logs.
std::string_view kv_cache_dtype_name(dtype type);

}  // namespace actorllm
