// quantization_config parsing: each format's settings as its tool writes them, and every setting that would change
// the math without being implemented refused by name.
#include "model/quantization_config.hpp"
#include "model/model_config.hpp"
#include "model/model_error.hpp"
#include "model/quantized_checkpoint.hpp"
#include "model/weight_table.hpp"

#include "kernels/dtype.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

using namespace actorllm;
using namespace actorllm::model;

namespace {

std::string error_of(const std::string& json) {
  try {
    (void)parse_quantization_config(json, "config.json");
  } catch (const model_error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("quantization_config: AWQ, GPTQ, fp8 and compressed-tensors as their tools write them") {
  const auto awq = parse_quantization_config(
      R"({"quant_method":"awq","bits":4,"group_size":128,"zero_point":true,"version":"gemm",
          "modules_to_not_convert":null})",
      "c");
  CHECK(awq.method == quant_method::awq);
  CHECK(awq.bits == 4);
  CHECK(awq.group_size == 128);
  CHECK_FALSE(awq.symmetric);

  const auto gptq = parse_quantization_config(
      R"({"quant_method":"gptq","bits":8,"group_size":-1,"desc_act":false,"sym":true,"checkpoint_format":"gptq"})",
      "c");
  CHECK(gptq.method == quant_method::gptq);
  CHECK(gptq.bits == 8);
  CHECK(gptq.group_size == 0);
  CHECK(gptq.gptq_zero_offset);
  CHECK(parse_quantization_config(R"({"quant_method":"gptq","bits":4,"group_size":128,"checkpoint_format":"gptq_v2"})",
                                  "c")
            .gptq_zero_offset == false);

  const auto fp8 = parse_quantization_config(
      R"({"quant_method":"fp8","activation_scheme":"dynamic","weight_block_size":[128,128]})", "c");
  CHECK(fp8.method == quant_method::fp8);
  CHECK(fp8.block_out == 128);

  const auto w8a8 = parse_quantization_config(R"({"quant_method":"compressed-tensors","format":"int-quantized",
      "config_groups":{"group_0":{"targets":["Linear"],
        "weights":{"num_bits":8,"type":"int","symmetric":true,"strategy":"channel"},
        "input_activations":{"num_bits":8,"type":"int","symmetric":true,"strategy":"token","dynamic":true}}},
      "ignore":["lm_head"],"quantization_status":"compressed","kv_cache_scheme":null,"sparsity_config":{}})",
                                              "c");
  CHECK(w8a8.method == quant_method::compressed_tensors);
  CHECK(w8a8.format == ct_format::int_quantized);
  CHECK(w8a8.activations == activation_quant::int8_per_token);
  CHECK(w8a8.describe().find("W8A8") != std::string::npos);
}

TEST_CASE("quantization_config: what changes the math and is not implemented is refused naming the field") {
  CHECK(error_of(R"({"quant_method":"bitsandbytes"})").find("quantization_config.quant_method") != std::string::npos);
  CHECK(error_of(R"({"quant_method":"gptq","bits":4,"group_size":128,"desc_act":true})").find("desc_act") !=
        std::string::npos);
  CHECK(error_of(R"({"quant_method":"gptq","bits":3,"group_size":128})").find("bits") != std::string::npos);
  CHECK(error_of(R"({"quant_method":"awq","bits":4,"group_size":128,"version":"gemv"})").find("version") !=
        std::string::npos);
  CHECK(error_of(R"({"quant_method":"awq","bits":4,"group_size":128,"zero_point":false})").find("zero_point") !=
        std::string::npos);
  const std::string two_groups = error_of(R"({"quant_method":"compressed-tensors","format":"pack-quantized",
      "config_groups":{"a":{"targets":["Linear"],"weights":{"num_bits":4,"strategy":"group","group_size":128}},
                       "b":{"targets":["Linear"],"weights":{"num_bits":8,"strategy":"channel"}}}})");
  CHECK(two_groups.find("config_groups") != std::string::npos);
  const std::string static_act = error_of(R"({"quant_method":"compressed-tensors","format":"int-quantized",
      "config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"strategy":"channel"},
        "input_activations":{"num_bits":8,"type":"int","strategy":"tensor","dynamic":false}}}})");
  CHECK(static_act.find("input_activations.dynamic") != std::string::npos);
  CHECK(error_of(R"({"quant_method":"compressed-tensors","format":"pack-quantized","kv_cache_scheme":{"num_bits":8},
      "config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":4,"strategy":"group","group_size":64}}}})")
            .find("kv_cache_scheme") != std::string::npos);
  CHECK(error_of(R"({"quant_method":"compressed-tensors","format":"marlin-24","config_groups":{}})").find("format") !=
        std::string::npos);
}

TEST_CASE("quantization_config: --quantization checks the checkpoint's method, or quantizes a float one to fp8") {
  quantization_config none;
  CHECK_FALSE(resolve_quantization(none, std::nullopt).quantized());
  const auto at_load = resolve_quantization(none, std::string("fp8"));
  CHECK(at_load.method == quant_method::fp8);
  CHECK(at_load.quantize_at_load);
  CHECK_THROWS_AS((void)resolve_quantization(none, std::string("awq")), model_error);
  CHECK_THROWS_AS((void)resolve_quantization(none, std::string("bitsandbytes")), model_error);
  quantization_config awq;
  awq.method = quant_method::awq;
  CHECK(resolve_quantization(awq, std::string("awq_marlin")).method == quant_method::awq);
  CHECK_THROWS_AS((void)resolve_quantization(awq, std::string("gptq")), model_error);
}

TEST_CASE("config.json: quantization_config is read into the model config") {
  const auto cfg = parse_model_config(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,
      "intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":32,
      "max_position_embeddings":64,"quantization_config":{"quant_method":"awq","bits":4,"group_size":32}})",
                                      "config.json");
  CHECK(cfg.quant.method == quant_method::awq);
  CHECK(cfg.quant.group_size == 32);
}

TEST_CASE("fp8 e4m3: every code decodes and encodes back to itself, ties go to even, and values saturate at 448") {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float v = fp8_e4m3_to_f32(code);
    if ((c & 0x7f) == 0x7f) {
      CHECK(std::isnan(v));
      continue;
    }
    if (c == 0x80) {  // -0 encodes as -0
      CHECK(f32_to_fp8_e4m3(v) == 0x80);
      continue;
    }
    CHECK(f32_to_fp8_e4m3(v) == code);
  }
  CHECK(fp8_e4m3_to_f32(0x7e) == 448.0f);
  CHECK(fp8_e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));
  CHECK(f32_to_fp8_e4m3(1000.0f) == 0x7e);
  CHECK(f32_to_fp8_e4m3(-1000.0f) == 0xfe);
  CHECK(f32_to_fp8_e4m3(1.0625f) == 0x38);                // halfway between 1 and 1.125: to even (1)
  CHECK(f32_to_fp8_e4m3(1.1875f) == 0x3a);                // halfway between 1.125 and 1.25: to even (1.25)
  CHECK(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)) == 0x00);  // half the smallest subnormal: to even (0)
}

TEST_CASE(
    "quantized weights: a tensor-parallel size that cuts a group of a row-parallel weight is refused naming the "
    "sizes that work") {
  weight_decl down;
  down.name = "model.layers.0.mlp.down_proj.weight";
  down.shape = {128, 96};
  down.kind = shard_kind::row;
  down.n_units = 96;
  down.unit_size = 1;
  down.allow_uneven = true;
  CHECK_NOTHROW(check_group_split(down, 32, 3));  // 32 columns each: whole groups
  std::string error;
  try {
    check_group_split(down, 32, 2);  // 48 columns each: the second group is cut
  } catch (const model_error& e) {
    error = e.what();
  }
  CHECK(error.find("tensor_parallel_size 2") != std::string::npos);
  CHECK(error.find("sizes that keep groups whole: 1, 3") != std::string::npos);
  CHECK_NOTHROW(check_group_split(down, 96, 2));  // one group per channel: any split
  weight_decl q = down;
  q.kind = shard_kind::column;  // output rows never share a group
  CHECK_NOTHROW(check_group_split(q, 32, 2));
}
