// Decode steps as replayed graphs (vLLM's CUDA graphs): for each capture size, the decode forward of one shard
// recorded once over persistent device buffers, then replayed after ONE upload of the step's packed inputs. The
// policy (sizes, padding, layout, memory) is model/decode_graph_plan; the recording is the backend's
// (backend::capture_graph: CUDA graphs on cuda_backend). It lives in model/ because it drives the model's forward;
// kernels/ never sees a model.
//
// What makes the forward capturable: every tensor a graph names is allocated before its capture and never moves
// afterwards. The inputs and logits are this class's; the activations are the model's graph set
// (llama_model::forward_into), the ops' internal scratch is the backend's graph set (backend::use_graph_scratch);
// eager steps grow only their own sets. A warm-up forward of every size runs before the first capture so each
// scratch is at its final size, and the backend refuses any allocation, host copy or wait inside a capture.
#pragma once

#include "kernels/backend.hpp"
#include "model/decode_graph_plan.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/step_inputs.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace actorllm::model {

/// The decode graphs of one shard over one KV cache.
class decode_graphs {
 public:
  /// Warms up and captures a graph for each of `sizes` (ascending, not empty) over `cache`, whose block tables hold
  /// at most `max_blocks_per_seq` blocks per sequence. `model` must be graph_capable() and `be` support graphs. The
  /// warm-up writes nothing into the cache (its rows are all padding). model, cache and be must outlive this, and
  /// the cache must not be reallocated while it lives. Throws std::invalid_argument for a backend without graphs or a
  /// model that is not graph_capable(), else what the backend or the model throws.
  decode_graphs(backend& be, llama_model& model, kv_cache& cache, std::vector<int32_t> sizes,
                int64_t max_blocks_per_seq);
  ~decode_graphs();
  decode_graphs(const decode_graphs&) = delete;
  decode_graphs& operator=(const decode_graphs&) = delete;

  std::span<const int32_t> sizes() const { return sizes_; }
  int64_t max_blocks_per_seq() const { return max_blocks_; }
  /// Device bytes the graphs' buffers and scratch took when they were built (the graph objects' own memory, which
  /// CUDA keeps outside the backend's pool, not counted).
  size_t device_bytes() const { return device_bytes_; }

  /// Whether `batch` can replay a graph (graph_ineligible::none) and otherwise why.
  graph_ineligible eligibility(const forward_batch& batch) const;
  /// Runs `batch` (eligible, else std::invalid_argument) through the graph of its padded size: packs its inputs,
  /// uploads them in one copy, replays. Returns the logits of its rows, f32 [rows, n_vocab] in row order: a view of the
  /// graphs' buffer, valid until the next replay. Queued like any op: download (or synchronize) before reading.
  tensor replay(const forward_batch& batch);

 private:
  struct graph_size {
    decode_graph_layout layout;
    step_inputs in;  // views into the packed input buffer, by `layout`
    tensor logits;   // the first layout.batch rows of logits_
    std::unique_ptr<op_graph> graph;
  };

  /// Views of inputs_ for a graph of `layout`.
  step_inputs inputs_for(const decode_graph_layout& layout) const;
  /// Packs `batch` for g and uploads it (padding rows for an empty batch).
  void upload(graph_size& g, const forward_batch& batch);

  backend& be_;
  llama_model& model_;
  kv_cache& cache_;
  std::vector<int32_t> sizes_;
  int64_t max_blocks_ = 0;
  tensor inputs_;  // the packed inputs, the largest size's bytes, shared by every graph
  tensor logits_;  // f32 [largest, n_vocab]
  std::vector<graph_size> graphs_;
  std::vector<std::byte> host_;  // the packed inputs on the host
  size_t device_bytes_ = 0;
};

}  // namespace actorllm::model
