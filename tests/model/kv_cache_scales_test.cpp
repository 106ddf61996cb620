// An fp8 KV cache's scales from a checkpoint: vLLM's k_scale / v_scale names (and the older kv_scale), 1 where none
// is given, the stage's layer range only, and bad scales refused naming the tensor.
#include "model/kv_cache_scales.hpp"
#include "model/model_error.hpp"
#include "model_test_util.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace actorllm;
using namespace actorllm::model;

namespace {

test_util::test_tensor f32_scalar(const std::string& name, float v, std::vector<int64_t> shape = {}) {
  std::string bytes(4, '\0');
  std::memcpy(bytes.data(), &v, 4);
  return {name, dtype::f32, std::move(shape), bytes};
}

std::filesystem::path checkpoint_with(const std::vector<test_util::test_tensor>& tensors) {
  auto dir = test_util::temp_dir("kv_scales");
  test_util::write_file(dir / "model.safetensors", test_util::make_safetensors(tensors));
  return dir;
}

}  // namespace

TEST_CASE("read_kv_cache_scales: k_scale and v_scale by vLLM's names, kv_scale for both, 1 where absent") {
  std::string bf16(2, '\0');
  const uint16_t half = f32_to_bf16(0.5f);
  std::memcpy(bf16.data(), &half, 2);
  const auto dir = checkpoint_with({
      f32_scalar("model.layers.0.self_attn.k_scale", 0.25f),
      f32_scalar("model.layers.0.self_attn.v_scale", 0.125f, {1}),
      f32_scalar("model.layers.1.self_attn.kv_scale", 2.0f),
      f32_scalar("model.layers.2.self_attn.k_proj.k_scale", 3.0f),
      {"model.layers.2.self_attn.v_proj.v_scale", dtype::bf16, {}, bf16},
      f32_scalar("model.layers.4.self_attn.kv_scale", 2.0f),
      f32_scalar("model.layers.4.self_attn.v_scale", 7.0f),  // the specific name wins
  });
  const std::vector<kv_scales> all = read_kv_cache_scales(dir, 0, 5);
  REQUIRE(all.size() == 5);
  CHECK(all[0].k == 0.25f);
  CHECK(all[0].v == 0.125f);
  CHECK(all[1].k == 2.0f);
  CHECK(all[1].v == 2.0f);
  CHECK(all[2].k == 3.0f);
  CHECK(all[2].v == 0.5f);
  CHECK(all[3].k == 1.0f);  // none given
  CHECK(all[3].v == 1.0f);
  CHECK(all[4].k == 2.0f);
  CHECK(all[4].v == 7.0f);
  // A later pipeline stage reads its own layers, from index 0 of its cache.
  const std::vector<kv_scales> stage = read_kv_cache_scales(dir, 2, 4);
  REQUIRE(stage.size() == 2);
  CHECK(stage[0].k == 3.0f);
  CHECK(stage[1].k == 1.0f);
}

TEST_CASE("read_kv_cache_scales refuses a scale that is not one positive finite float, naming it") {
  const auto zero = checkpoint_with({f32_scalar("model.layers.0.self_attn.k_scale", 0.0f)});
  CHECK(test_util::mentions(test_util::error_of([&] { read_kv_cache_scales(zero, 0, 1); }),
                            {"model.layers.0.self_attn.k_scale", "positive and finite"}));
  std::string two(8, '\0');
  const auto vec = checkpoint_with({{"model.layers.0.self_attn.v_scale", dtype::f32, {2}, two}});
  CHECK(test_util::mentions(test_util::error_of([&] { read_kv_cache_scales(vec, 0, 1); }),
                            {"model.layers.0.self_attn.v_scale", "one F32, F16 or BF16 value"}));
}
