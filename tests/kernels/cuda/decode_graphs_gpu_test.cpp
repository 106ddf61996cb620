// CUDA graphs of decode steps on the GPU (model::decode_graphs over cuda_backend): stories260K greedy ids through
// the graphs equal the eager CUDA run and the golden ids at batch 1, 3 (the graph of 4) and 8; a replay after the
// block tables change gives the eager logits; a capture refuses an allocation. Skipped ("skipped: no GPU") where
// there is none; the same checks run on the CPU through the recording backend (tests/model/decode_graphs_test.cpp).
#include "gpu_test_util.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "model/stories_golden.hpp"
#include "support/decode_graph_harness.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

using namespace actorllm;
using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::require_gpu;

TEST_CASE("cuda decode graphs: stories260K greedy ids equal eager and the golden at batch 1, 3 and 8" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  for (size_t n : {size_t{1}, size_t{3}, size_t{8}}) {
    CAPTURE(n);
    const test::golden_batch g = test::golden_prompts(n);
    const int64_t steps = 32;
    cuda::cuda_backend eager_be{0};
    test::stories_graph_model eager{eager_be};
    const auto eager_ids = eager.greedy(g.prompts, steps, false);

    cuda::cuda_backend be{0};
    test::stories_graph_model m{be};
    m.capture(8);  // 1, 2, 4, 8
    REQUIRE(m.graphs);
    CHECK(m.graphs->device_bytes() > 0);
    const auto graph_ids = m.greedy(g.prompts, steps, true);
    for (size_t s = 0; s < n; ++s) {
      CAPTURE(s);
      CHECK(graph_ids[s] == eager_ids[s]);
      CHECK(graph_ids[s] == std::vector<int32_t>(g.expected[s].begin(), g.expected[s].begin() + steps));
    }
  }
}

TEST_CASE("cuda decode graphs: a replay after the block tables change gives the eager logits" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  const test::golden_batch g = test::golden_prompts(3);
  cuda::cuda_backend eager_be{0}, be{0};
  test::stories_graph_model eager{eager_be}, m{be};
  m.capture(4);
  const auto first = m.greedy(g.prompts, 20, true, 0);
  const auto moved = m.greedy(g.prompts, 20, true, 40);
  const auto reference = eager.greedy(g.prompts, 20, false, 80);
  CHECK(first == reference);
  CHECK(moved == reference);

  const auto [want, got] = test::logits_over_new_tables(eager, m);
  REQUIRE(got.size() == want.size());
  // The graph runs 4 rows where eager runs 3: cuBLAS may pick another SGEMM algorithm, so f32 rounding may differ.
  for (size_t i = 0; i < got.size(); ++i)
    REQUIRE(std::fabs(got[i] - want[i]) <= 1e-4f + 1e-4f * std::fabs(want[i]));
}

TEST_CASE("cuda graph capture refuses an allocation, an upload and a wait, and the backend works after" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda::cuda_backend be{0};
  CHECK(be.supports_graphs());
  tensor t = be.alloc(dtype::f32, {4});
  const float ones[4] = {1, 1, 1, 1};
  CHECK_THROWS_AS(be.capture_graph([&] { be.alloc(dtype::f32, {4}); }), std::logic_error);
  CHECK_THROWS_AS(be.capture_graph([&] { be.upload(t, ones, sizeof ones); }), std::logic_error);
  CHECK_THROWS_AS(be.capture_graph([&] { be.synchronize(); }), std::logic_error);
  // A graph of one op: t += t, replayed twice.
  be.upload(t, ones, sizeof ones);
  auto graph = be.capture_graph([&] { be.add(t, t, t); });
  graph->replay();
  graph->replay();
  float back[4] = {};
  be.download(t, back, sizeof back);
  for (float x : back)
    CHECK(x == 4.0f);
}
