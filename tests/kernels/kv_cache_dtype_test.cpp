// --kv-cache-dtype's names: vLLM's spellings accepted, its unimplemented fp8 formats and unknown values refused by
// name; auto following the model's dtype; which devices store which element type.
#include <doctest/doctest.h>

#include <string>

#include "kernels/kv_cache_dtype.hpp"

using namespace actorllm;

TEST_CASE("--kv-cache-dtype takes vLLM's spellings and refuses others by name") {
  struct accepted {
    const char* text;
    bool follows_model;
    dtype type;
  };
  for (const accepted& a : {accepted{"auto", true, dtype::f32}, accepted{"bfloat16", false, dtype::bf16},
                            accepted{"float16", false, dtype::f16}, accepted{"half", false, dtype::f16},
                            accepted{"float32", false, dtype::f32}, accepted{"fp8", false, dtype::fp8_e4m3},
                            accepted{"fp8_e4m3", false, dtype::fp8_e4m3}}) {
    CAPTURE(a.text);
    std::string error;
    const auto c = parse_kv_cache_dtype(a.text, error);
    REQUIRE(c);
    CHECK(error.empty());
    CHECK(c->follows_model == a.follows_model);
    if (!a.follows_model)
      CHECK(c->type == a.type);
  }
  for (const char* not_implemented : {"fp8_e5m2", "fp8_inc", "fp8_ds_mla"}) {
    CAPTURE(not_implemented);
    std::string error;
    CHECK_FALSE(parse_kv_cache_dtype(not_implemented, error));
    CHECK(error.find("--kv-cache-dtype") != std::string::npos);
    CHECK(error.find(std::string{"'"} + not_implemented + "' is not implemented") != std::string::npos);
  }
  for (const char* unknown : {"bf16x", "", "FP8", "int8"}) {
    CAPTURE(unknown);
    std::string error;
    CHECK_FALSE(parse_kv_cache_dtype(unknown, error));
    CHECK(error.find(std::string{"--kv-cache-dtype: '"} + unknown + "' is not one of auto, bfloat16") !=
          std::string::npos);
  }
}

TEST_CASE("--kv-cache-dtype auto follows the model's dtype, a given type overrides it") {
  const kv_cache_dtype_choice automatic{};
  CHECK(resolve_kv_cache_dtype(automatic, dtype::bf16) == dtype::bf16);
  CHECK(resolve_kv_cache_dtype(automatic, dtype::f16) == dtype::f16);
  CHECK(resolve_kv_cache_dtype(automatic, dtype::f32) == dtype::f32);
  CHECK(resolve_kv_cache_dtype(automatic, dtype::i32) == dtype::f32);
  CHECK(resolve_kv_cache_dtype({false, dtype::bf16}, dtype::f32) == dtype::bf16);
  CHECK(resolve_kv_cache_dtype({false, dtype::f32}, dtype::bf16) == dtype::f32);
  CHECK(resolve_kv_cache_dtype({false, dtype::fp8_e4m3}, dtype::bf16) == dtype::fp8_e4m3);
}

TEST_CASE("the CPU stores f32, bf16 and f16 KV caches and refuses fp8 by name, CUDA stores fp8") {
  for (dtype t : {dtype::f32, dtype::bf16, dtype::f16}) {
    CHECK(kv_cache_dtype_unsupported(t, device_kind::cpu).empty());
    CHECK(kv_cache_dtype_unsupported(t, device_kind::cuda).empty());
  }
  const std::string why = kv_cache_dtype_unsupported(dtype::fp8_e4m3, device_kind::cpu);
  CHECK(why.find("--kv-cache-dtype fp8") != std::string::npos);
  CHECK(why.find("cpu") != std::string::npos);
  CHECK(kv_cache_dtype_unsupported(dtype::fp8_e4m3, device_kind::cuda).empty());
  CHECK_FALSE(kv_cache_dtype_unsupported(dtype::i32, device_kind::cuda).empty());
  CHECK(kv_cache_dtype_name(dtype::bf16) == "bfloat16");
  CHECK(kv_cache_dtype_name(dtype::fp8_e4m3) == "fp8_e4m3");
}
