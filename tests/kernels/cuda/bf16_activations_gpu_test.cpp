// bf16 activations end to end on the GPU: stories260K with its weights rounded to bf16, on CUDA (whose norms and
// SiLU×mul then write bf16 for the matmuls: llama_model::normed_input_type) against the CPU backend on the same bf16
// weights (f32 activations, rounded to bf16 inside its bf16 matmuls: nearly the same values). Both run the same
// tokens (the CPU's greedy choice, teacher-forced into CUDA) at batch 1 (the GEMV) and 12 (cuBLAS over bf16 inputs):
// every step's logits agree within a relative L2 of 1e-2 and the top token agrees wherever the CPU's margin is clear.
// Skipped ("skipped: no GPU") where there is none.
#include "gpu_test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "support/decode_graph_harness.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

using namespace actorllm;
using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::require_gpu;

namespace {

// Relative L2 distance of two logit rows, and whether their top tokens agree or the reference's margin is within
// `margin` (a near tie that a last-bit difference may flip).
struct row_compare {
  double rel_l2 = 0.0;
  bool top_agrees = true;
};

row_compare compare_row(const float* want, const float* got, int64_t n, double margin) {
  double diff = 0.0, norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  const auto top_want = std::max_element(want, want + n) - want, top_got = std::max_element(got, got + n) - got;
  std::vector<float> sorted(want, want + n);
  std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<>());
  const bool clear = sorted[0] - sorted[1] > margin;
  return {std::sqrt(diff / std::max(norm, 1e-30)), top_want == top_got || !clear};
}

}  // namespace

TEST_CASE("cuda bf16 activations: stories260K in bf16 follows the CPU's logits at batch 1 and 12" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  model::load_options bf16;
  bf16.weight_dtype = dtype::bf16;
  for (const size_t n : {size_t{1}, size_t{12}}) {
    CAPTURE(n);
    const test::golden_batch g = test::golden_prompts(n);
    std::unique_ptr<backend> cpu = make_backend(device_kind::cpu, 2);
    test::stories_graph_model on_cpu{*cpu, 128, bf16};
    cuda::cuda_backend be{0};
    test::stories_graph_model on_gpu{be, 128, bf16};
    REQUIRE(on_gpu.llm.normed_input_type() == dtype::bf16);  // the path under test
    const int64_t vocab = on_cpu.llm.config().n_vocab, steps = 16, block = test::stories_graph_model::block_size;
    size_t longest = 0;
    for (const auto& p : g.prompts)
      longest = std::max(longest, p.size());
    const auto blocks = static_cast<int64_t>((longest + steps + block - 1) / block);
    std::vector<std::vector<int32_t>> tables, ids(n);
    for (size_t s = 0; s < n; ++s) {
      tables.push_back(
          test::stories_graph_model::table_of(static_cast<int64_t>(s), static_cast<int64_t>(n), blocks, 0));
      model::forward_batch fb;
      fb.add_sequence(g.prompts[s], 0, tables.back(), true);
      const std::vector<float> want = on_cpu.llm.forward(fb, on_cpu.cache), got = on_gpu.llm.forward(fb, on_gpu.cache);
      const row_compare c = compare_row(want.data(), got.data(), vocab, 0.05);
      CHECK_MESSAGE(c.rel_l2 < 1e-2, "prefill of sequence " << s << ": relative L2 " << c.rel_l2);
      CHECK(c.top_agrees);
      ids[s].push_back(test::stories_graph_model::argmax(want.data(), vocab));
    }
    for (int64_t step = 1; step < steps; ++step) {
      model::forward_batch fb;
      for (size_t s = 0; s < n; ++s) {
        const int32_t tok[1] = {ids[s].back()};
        fb.add_sequence(tok, static_cast<int32_t>(g.prompts[s].size() + ids[s].size() - 1), tables[s], true);
      }
      const std::vector<float> want = on_cpu.llm.forward(fb, on_cpu.cache), got = on_gpu.llm.forward(fb, on_gpu.cache);
      for (size_t s = 0; s < n; ++s) {
        const row_compare c = compare_row(want.data() + s * vocab, got.data() + s * vocab, vocab, 0.05);
        CHECK_MESSAGE(c.rel_l2 < 1e-2, "step " << step << " sequence " << s << ": relative L2 " << c.rel_l2);
        CHECK_MESSAGE(c.top_agrees, "step " << step << " sequence " << s);
        ids[s].push_back(test::stories_graph_model::argmax(want.data() + s * vocab, vocab));
      }
    }
  }
}

TEST_CASE("cuda bf16 activations: graph replays of stories260K in bf16 give the eager CUDA ids at batch 1 and 4" *
          doctest::skip(!gpu_available())) {
  // Batches that fill their graph exactly (1 and 4): the same kernels with the same shapes as the eager run, the
  // GEMV's and cuBLAS's (stories260K's down projection, 172 inputs, is no whole number of GEMV chunks), so the ids
  // equal the eager run's exactly.
  require_gpu();
  model::load_options bf16;
  bf16.weight_dtype = dtype::bf16;
  for (const size_t n : {size_t{1}, size_t{4}}) {
    CAPTURE(n);
    const test::golden_batch g = test::golden_prompts(n);
    cuda::cuda_backend eager_be{0};
    test::stories_graph_model eager{eager_be, 128, bf16};
    const auto want = eager.greedy(g.prompts, 24, false);
    cuda::cuda_backend be{0};
    test::stories_graph_model m{be, 128, bf16};
    m.capture(8);
    REQUIRE(m.graphs);
    CHECK(m.greedy(g.prompts, 24, true) == want);
  }
}
