// model::decode_graphs on the recording CPU backend (tests/support/recording_graph_backend.hpp): the warm-up and
// capture allocate, copy and wait for nothing while recording, a replay is one upload and one graph, padded rows are
// inert, and greedy stories260K through the graphs equals the eager run and the golden ids. The same run on CUDA is
// tests/kernels/cuda/decode_graphs_gpu_test.cpp.
#include "model/stories_golden.hpp"
#include "support/decode_graph_harness.hpp"
#include "support/recording_graph_backend.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

using namespace actorllm;

namespace {

std::vector<float> cache_snapshot(const model::kv_cache& cache) {
  std::vector<float> out;
  for (int64_t l = 0; l < cache.shape().n_layer; ++l) {
    const kv_layer layer = cache.layer(l);
    for (const tensor* t : {&layer.k, &layer.v}) {
      const auto* p = t->data_as<float>();
      out.insert(out.end(), p, p + t->numel());
    }
  }
  return out;
}

}  // namespace

TEST_CASE("decode graphs: a capture per size, recorded without allocating, copying or waiting") {
  test::recording_graph_backend be;
  test::stories_graph_model m{be};
  m.capture(8);  // sizes 1, 2, 4, 8; the backend throws if the forward allocates or syncs while recording
  REQUIRE(m.graphs);
  CHECK(be.captures == 4);
  CHECK(be.graph_scratch_on == 1);
  CHECK(be.graph_scratch_off == 1);  // eager steps are back on their own scratch
  CHECK(m.graphs->max_blocks_per_seq() == 32);
  CHECK(std::vector<int32_t>(m.graphs->sizes().begin(), m.graphs->sizes().end()) == std::vector<int32_t>{1, 2, 4, 8});
  CHECK(m.graphs->device_bytes() == 0);  // the CPU backend reports no device memory
}

TEST_CASE("decode graphs: greedy stories260K through the graphs equals eager and the golden ids at batch 1, 3, 8") {
  for (size_t n : {size_t{1}, size_t{3}, size_t{8}}) {
    CAPTURE(n);
    const test::golden_batch g = test::golden_prompts(n);
    const int64_t steps = 24;

    cpu::cpu_backend eager_be{1};
    test::stories_graph_model eager{eager_be};
    const auto eager_ids = eager.greedy(g.prompts, steps, false);

    test::recording_graph_backend be;
    test::stories_graph_model m{be};
    m.capture(8);
    const int replays_before = be.replays, uploads_before = be.uploads;
    const auto graph_ids = m.greedy(g.prompts, steps, true);
    CHECK(be.replays - replays_before == steps - 1);  // every decode step replayed a graph (3 rows: the 4-row one)
    // One upload per replay, plus the eager prefills' (each prepares its inputs with its own uploads).
    CHECK(be.uploads - uploads_before >= steps - 1);

    for (size_t s = 0; s < n; ++s) {
      CAPTURE(s);
      CHECK(graph_ids[s] == eager_ids[s]);
      const std::vector<int32_t> golden(g.expected[s].begin(), g.expected[s].begin() + steps);
      CHECK(graph_ids[s] == golden);
    }
  }
}

TEST_CASE("decode graphs: a replay is exactly one upload, padded rows write no KV and their logits are not returned") {
  test::recording_graph_backend be;
  test::stories_graph_model m{be};
  m.capture(4);
  // Three sequences with a few cached tokens each (prefilled eagerly), then one decode step of 3 rows (graph of 4).
  const test::golden_batch g = test::golden_prompts(3);
  std::vector<std::vector<int32_t>> tables;
  for (int64_t s = 0; s < 3; ++s) {
    tables.push_back(test::stories_graph_model::table_of(s, 3, 2, 10));
    model::forward_batch fb;
    fb.add_sequence(g.prompts[static_cast<size_t>(s)], 0, tables.back(), true);
    m.llm.forward(fb, m.cache);
  }
  model::forward_batch step;
  std::vector<int64_t> slots;
  for (int64_t s = 0; s < 3; ++s) {
    const auto pos = static_cast<int32_t>(g.prompts[static_cast<size_t>(s)].size());
    const int32_t tok[1] = {7};
    step.add_sequence(tok, pos, tables[static_cast<size_t>(s)], true);
    slots.push_back(int64_t{tables[static_cast<size_t>(s)][static_cast<size_t>(pos / 16)]} * 16 + pos % 16);
  }
  REQUIRE(m.graphs->eligibility(step) == model::graph_ineligible::none);
  const std::vector<float> before = cache_snapshot(m.cache);
  const int uploads = be.uploads;
  const tensor logits = m.graphs->replay(step);
  CHECK(be.uploads - uploads == 1);
  CHECK(logits.dim(0) == 3);  // the padded fourth row is not handed back
  CHECK(logits.dim(1) == m.llm.config().n_vocab);

  // Only the three real rows' slots changed, in every layer's k and v.
  const std::vector<float> after = cache_snapshot(m.cache);
  REQUIRE(after.size() == before.size());
  const int64_t hd = m.cache.shape().head_dim, row = m.cache.shape().n_head_kv * hd, bs = m.cache.block_size();
  const int64_t per_tensor = m.cache.n_blocks() * bs * row;
  const bool heads_outer = m.cache.layer(0).heads_outer;  // a block [kv head][slot][head_dim], else [slot][kv head]
  for (size_t i = 0; i < after.size(); ++i) {
    if (std::memcmp(&after[i], &before[i], sizeof(float)) == 0)
      continue;
    const int64_t e = static_cast<int64_t>(i) % per_tensor;
    const int64_t slot = heads_outer ? e / (bs * row) * bs + e % (bs * hd) / hd : e / row;
    INFO("element " << i << " in slot " << slot);
    CHECK(std::find(slots.begin(), slots.end(), slot) != slots.end());
  }
}

TEST_CASE("decode graphs: a replay after the block tables change gives the eager result") {
  const test::golden_batch g = test::golden_prompts(3);
  cpu::cpu_backend eager_be{1};
  test::stories_graph_model eager{eager_be};
  test::recording_graph_backend be;
  test::stories_graph_model m{be};
  m.capture(4);
  // The same greedy run twice through the same graphs, the second time over other blocks (the persistent block
  // tables are overwritten by each replay's upload), and once eagerly over a third placement.
  const auto first = m.greedy(g.prompts, 20, true, 0);
  const auto moved = m.greedy(g.prompts, 20, true, 40);
  const auto reference = eager.greedy(g.prompts, 20, false, 80);
  CHECK(first == reference);
  CHECK(moved == reference);

  // Logits too, not only their argmax: one decode step over tables that differ from the previous replay's.
  const auto [want, got] = test::logits_over_new_tables(eager, m);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    REQUIRE(std::fabs(got[i] - want[i]) <= 1e-5f + 1e-5f * std::fabs(want[i]));
}

TEST_CASE("decode graphs: an ineligible batch is refused by replay, not run wrongly") {
  test::recording_graph_backend be;
  test::stories_graph_model m{be};
  m.capture(2);
  model::forward_batch prefill;
  prefill.add_sequence(std::vector<int32_t>{1, 2}, 0, {0}, true);
  CHECK(m.graphs->eligibility(prefill) == model::graph_ineligible::not_decode);
  CHECK_THROWS(m.graphs->replay(prefill));
  model::forward_batch three;
  for (int32_t s = 0; s < 3; ++s)
    three.add_sequence(std::vector<int32_t>{1}, 0, {s}, true);
  CHECK(m.graphs->eligibility(three) == model::graph_ineligible::too_large);
}
