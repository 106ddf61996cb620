// bf16 activations end to end on the GPU: stories260K with its weights rounded to bf16, on CUDA (whose norms and
// SiLU×mul then write bf16 for the matmuls: llama_model::normed_input_type) against the CPU backend on the same bf16
// weights (f32 activations, rounded to bf16 inside its bf16 matmuls: the same values). Greedy ids at batch 1 (the
// GEMV) and 12 (cuBLAS over bf16 inputs) agree, eager and through decode graphs. Skipped ("skipped: no GPU") where
// there is none.
#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "support/decode_graph_harness.hpp"

#include <doctest/doctest.h>

#include <memory>

using namespace actorllm;
using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::require_gpu;

TEST_CASE("cuda bf16 activations: stories260K in bf16 decodes the CPU's greedy ids at batch 1 and 12" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  model::load_options bf16;
  bf16.weight_dtype = dtype::bf16;
  for (size_t n : {size_t{1}, size_t{12}}) {
    CAPTURE(n);
    const test::golden_batch g = test::golden_prompts(n);
    const int64_t steps = 24;
    std::unique_ptr<backend> cpu = make_backend(device_kind::cpu, 2);
    test::stories_graph_model on_cpu{*cpu, 128, bf16};
    CHECK(on_cpu.llm.normed_input_type() == dtype::f32);
    const auto want = on_cpu.greedy(g.prompts, steps, false);

    cuda::cuda_backend be{0};
    test::stories_graph_model on_gpu{be, 128, bf16};
    REQUIRE(on_gpu.llm.normed_input_type() == dtype::bf16);  // the path under test
    CHECK(on_gpu.greedy(g.prompts, steps, false) == want);
    on_gpu.capture(16);
    CHECK(on_gpu.greedy(g.prompts, steps, true, 64) == want);
  }
}
