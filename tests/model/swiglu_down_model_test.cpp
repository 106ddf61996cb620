// A bf16 Llama whose MLP the CPU backend runs as one op (cpu::swiglu_down: packed weights, intermediate size a
// multiple of 64): one pool call fewer per layer at decode, and the same greedy ids and logits (up to f32 rounding) as
// the two calls it replaces, prefill and decode.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "comm/collective.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/swiglu_down.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/model_config.hpp"
#include "model/model_source.hpp"
#include "model_test_util.hpp"
#include "reference_llama.hpp"

using namespace actorllm;
using namespace actorllm::model;
using namespace actorllm::model::test_util;

namespace {

std::string mlp_json() {
  return R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
      "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 96, "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
      "tie_word_embeddings": false})";
}

struct decode_run {
  std::vector<std::vector<float>> logits;  // the prefill's last row, then each decode step's
  std::vector<int32_t> ids;
  double calls_per_step = 0;  // the kernel pool's takeover calls per decode step
};

decode_run greedy(const std::filesystem::path& dir, bool fused, const std::vector<int32_t>& prompt, int64_t n) {
  cpu::set_swiglu_down_fused(fused);
  cpu::cpu_backend be{2};
  single_rank_collective single;
  auto loaded = load_shard(dir, shard_spec{}, {});
  llama_model model(loaded.config, std::move(loaded.weights), shard_spec{}, single, be);
  kv_cache cache(be, model.cache_shape(16), 8);
  const std::vector<int32_t> table{5, 0, 7, 2, 1, 6, 3, 4};
  auto step = [&](std::span<const int32_t> tokens, int32_t pos) {
    forward_batch fb;
    fb.add_sequence(tokens, pos, table, true);
    return model.forward(fb, cache, {});
  };
  decode_run run;
  run.logits.push_back(step(prompt, 0));
  be.pool().set_takeover_timing(true);
  for (int64_t i = 0; i < n; ++i) {
    const auto& last = run.logits.back();
    run.ids.push_back(static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    const int32_t tok[1] = {run.ids.back()};
    run.logits.push_back(step(tok, static_cast<int32_t>(prompt.size() + run.ids.size() - 1)));
  }
  run.calls_per_step = static_cast<double>(be.pool().takeover_timing_totals().calls) / static_cast<double>(n);
  be.pool().set_takeover_timing(false);
  cpu::set_swiglu_down_fused(true);
  return run;
}

}  // namespace

TEST_CASE("swiglu_down in a bf16 Llama: one call fewer per layer at decode, the ids and logits of the two calls") {
  if (!cpu::bf16_panels_preferred()) {
    MESSAGE("skipped: this build or CPU has no AVX512-BF16 kernels, so no weight is packed");
    return;
  }
  const model_config cfg = parse_model_config(mlp_json(), "config.json");
  const model_weights weights = random_weights(cfg, 41, dtype::bf16);
  const std::filesystem::path dir = temp_dir("actorllm-swiglu-down");
  write_checkpoint(dir, mlp_json(), weights);
  const std::vector<int32_t> prompt{3, 14, 15, 62, 5, 35, 59, 26, 53};
  constexpr int64_t n = 16;
  const decode_run one = greedy(dir, true, prompt, n);
  const decode_run two = greedy(dir, false, prompt, n);
  CHECK(two.calls_per_step - one.calls_per_step == doctest::Approx(static_cast<double>(cfg.n_layer)));
  CHECK(one.ids == two.ids);
  REQUIRE(one.logits.size() == two.logits.size());
  for (size_t s = 0; s < one.logits.size(); ++s) {
    float scale = 0.0f;
    for (float v : two.logits[s])
      scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < one.logits[s].size(); ++i)
      REQUIRE(std::abs(one.logits[s][i] - two.logits[s][i]) <= 1e-4f * scale);
  }
}
