// llama_model::normed_input_type: the type a block's normalised input is kept in follows the backend's
// matmul_input_type for the weights that read it (q/k/v, gate, up), and falls back to f32 when they disagree or when
// LoRA is on (its shrink reads the activation as f32). Over stories260K on the recording CPU backend with a
// device-like rule; no forward runs (the CPU kernels take f32 only).
#include "model/llama_model.hpp"
#include "model/model_source.hpp"
#include "support/decode_graph_harness.hpp"
#include "support/recording_graph_backend.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

using namespace actorllm;

namespace {

struct stories_on {
  explicit stories_on(test::recording_graph_backend& be)
      : loaded(model::load_shard(test::model_dir("stories260K"), {}, {})),
        llm(loaded.config, std::move(loaded.weights), {}, comm, be) {}
  single_rank_collective comm;
  model::loaded_shard loaded;
  model::llama_model llm;
};

}  // namespace

TEST_CASE("normed input type: f32 on the CPU, the backend's type when every reader agrees, f32 with LoRA") {
  test::recording_graph_backend be;
  stories_on m{be};
  CHECK(m.llm.normed_input_type() == dtype::f32);  // the CPU's own rule

  be.matmul_input_rule = [](const tensor&) { return dtype::bf16; };  // a device whose GEMMs read bf16 everywhere
  CHECK(m.llm.normed_input_type() == dtype::bf16);

  // One reader that takes f32 (a quantized gate|up stack, say): the activation stays f32 for all.
  const int64_t n_ff = m.loaded.config.n_ff;
  be.matmul_input_rule = [n_ff](const tensor& w) { return w.dim(0) == 2 * n_ff ? dtype::f32 : dtype::bf16; };
  CHECK(m.llm.normed_input_type() == dtype::f32);

  be.matmul_input_rule = [](const tensor&) { return dtype::bf16; };
  model::lora_limits limits;
  limits.max_loras = 1;
  limits.max_lora_rank = 4;
  m.llm.enable_lora(limits);
  CHECK(m.llm.normed_input_type() == dtype::f32);  // LoRA's shrink reads h as f32
}

TEST_CASE("normed input type: stories260K rounded to bf16 decodes on the CPU with f32 activations") {
  // The CPU half of the CUDA bf16-activation test (tests/kernels/cuda/bf16_activations_gpu_test.cpp).
  model::load_options bf16;
  bf16.weight_dtype = dtype::bf16;
  test::recording_graph_backend be;
  test::stories_graph_model m{be, 128, bf16};
  CHECK(m.llm.normed_input_type() == dtype::f32);
  const test::golden_batch g = test::golden_prompts(2);
  const auto ids = m.greedy(g.prompts, 8, false);
  REQUIRE(ids.size() == 2);
  CHECK(ids[0].size() == 8);
}
