// stories260K decoded greedily with several sequences in one batch, each decode step either eager (llama_model's
// forward) or replayed through model::decode_graphs: what the decode-graph tests compare, on the recording CPU
// backend (tests/model) and on CUDA (tests/kernels/cuda). Header-only.
#pragma once

#include "comm/collective.hpp"
#include "kernels/backend.hpp"
#include "model/decode_graph_plan.hpp"
#include "model/decode_graphs.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/model_source.hpp"
#include "model/stories_golden.hpp"
#include "support/test_paths.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

namespace actorllm::test {

/// The golden prompts, cycled to n sequences, and the golden greedy ids of each.
struct golden_batch {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> expected;
};

inline golden_batch golden_prompts(size_t n) {
  const stories_golden& g = load_stories_golden();
  std::vector<std::vector<int32_t>> p{g.bos_prompt_ids}, e{g.bos_output_ids};
  for (const auto& q : g.prompts) {
    p.push_back(q.prompt_ids);
    e.push_back(q.greedy_output_ids);
  }
  golden_batch b;
  for (size_t i = 0; i < n; ++i) {
    b.prompts.push_back(p[i % p.size()]);
    b.expected.push_back(e[i % e.size()]);
  }
  return b;
}

/// stories260K (f32, or as load_options say) on `be` with a cache of n_blocks blocks of 16 tokens and, on demand, its
/// decode graphs.
struct stories_graph_model {
  static constexpr int64_t block_size = 16;

  /// `options`: how the weights load (weight_dtype bf16: the checkpoint's f32 weights rounded to bf16).
  explicit stories_graph_model(backend& b, int64_t n_blocks = 128, const model::load_options& options = {})
      : be(b),
        loaded(model::load_shard(model_dir("stories260K"), {}, options)),
        llm(loaded.config, std::move(loaded.weights), {}, comm, be),
        cache(be, llm.cache_shape(block_size), n_blocks) {}

  /// Captures graphs for batches up to max_num_seqs (block tables of max_position_embeddings = 512 tokens).
  void capture(int32_t max_num_seqs) {
    graphs = std::make_unique<model::decode_graphs>(be, llm, cache, model::decode_graph_sizes(max_num_seqs),
                                                    llm.config().max_position_embeddings / block_size);
  }

  /// The logits of `batch` (f32 [rows, n_vocab]): eagerly, or by replaying a graph (the batch must be eligible).
  std::vector<float> logits(const model::forward_batch& batch, bool through_graph) {
    if (!through_graph)
      return llm.forward(batch, cache);
    const tensor out = graphs->replay(batch);
    std::vector<float> host(static_cast<size_t>(out.numel()));
    be.download(out, host.data(), out.nbytes());
    return host;
  }

  /// Block tables: sequence s of n takes blocks first + s, first + s + n, first + s + 2n, ... (interleaved, so a
  /// wrong table reads another sequence's cache).
  static std::vector<int32_t> table_of(int64_t s, int64_t n, int64_t blocks, int32_t first) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < blocks; ++i)
      t.push_back(first + static_cast<int32_t>(s + i * n));
    return t;
  }

  /// Greedy continuation of each prompt by n_steps tokens: each prompt prefilled alone (eagerly), then every decode
  /// step one batch of all sequences, eager or through the graphs. `first_block`: where the tables start.
  std::vector<std::vector<int32_t>> greedy(const std::vector<std::vector<int32_t>>& prompts, int64_t n_steps,
                                           bool through_graphs, int32_t first_block = 0) {
    const auto n = static_cast<int64_t>(prompts.size());
    const int64_t vocab = llm.config().n_vocab;
    size_t longest = 0;
    for (const auto& p : prompts)
      longest = std::max(longest, p.size());
    const int64_t blocks = (static_cast<int64_t>(longest) + n_steps + block_size - 1) / block_size;
    std::vector<std::vector<int32_t>> tables, out(prompts.size());
    for (int64_t s = 0; s < n; ++s) {
      tables.push_back(table_of(s, n, blocks, first_block));
      model::forward_batch fb;
      fb.add_sequence(prompts[static_cast<size_t>(s)], 0, tables.back(), true);
      const std::vector<float> l = llm.forward(fb, cache);
      out[static_cast<size_t>(s)].push_back(argmax(l.data(), vocab));
    }
    for (int64_t step = 1; step < n_steps; ++step) {
      model::forward_batch fb;
      for (int64_t s = 0; s < n; ++s) {
        const auto& o = out[static_cast<size_t>(s)];
        const int32_t tok[1] = {o.back()};
        fb.add_sequence(tok, static_cast<int32_t>(prompts[static_cast<size_t>(s)].size() + o.size() - 1),
                        tables[static_cast<size_t>(s)], true);
      }
      const std::vector<float> l = logits(fb, through_graphs);
      for (int64_t s = 0; s < n; ++s)
        out[static_cast<size_t>(s)].push_back(argmax(l.data() + s * vocab, vocab));
    }
    return out;
  }

  static int32_t argmax(const float* row, int64_t n) {
    return static_cast<int32_t>(std::max_element(row, row + n) - row);
  }

  backend& be;
  single_rank_collective comm;
  model::loaded_shard loaded;
  model::llama_model llm;
  model::kv_cache cache;
  std::unique_ptr<model::decode_graphs> graphs;
};

/// One decode step's logits eagerly (`want`) and replayed through `m`'s graphs (`got`), over block tables other
/// than those of the previous replay (the graphs' persistent tables are overwritten by this replay's upload), after
/// the same 3 tokens were prefilled eagerly into both caches. `m` has graphs for 3 sequences or more.
struct step_logits {
  std::vector<float> want;
  std::vector<float> got;
};

inline step_logits logits_over_new_tables(stories_graph_model& eager, stories_graph_model& m) {
  model::forward_batch step;
  for (int64_t s = 0; s < 3; ++s) {
    const int32_t tok[1] = {5};
    step.add_sequence(tok, 3, stories_graph_model::table_of(s, 3, 1, 90), true);
  }
  for (int64_t s = 0; s < 3; ++s) {
    model::forward_batch fb;
    fb.add_sequence(std::vector<int32_t>{1, 5, 9}, 0, step.sequences[static_cast<size_t>(s)].block_table, false);
    eager.llm.forward(fb, eager.cache);
    m.llm.forward(fb, m.cache);
  }
  return {eager.logits(step, false), m.logits(step, true)};
}

}  // namespace actorllm::test
