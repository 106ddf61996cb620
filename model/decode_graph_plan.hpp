// The host policy of CUDA graphs for decode steps (vLLM's cudagraph capture), as plain C++ with no device call, so
// CI tests it without a GPU: which batch sizes get a graph, the size a batch is padded up to, which steps may replay
// a graph, how a step's inputs are packed so one host-to-device copy updates a graph's persistent buffers, and how
// much device memory the graphs keep (the KV-cache sizing subtracts it).
//
// A graph of size B replays one decode forward of exactly B rows, each one token of its own sequence. A batch of b
// rows runs the graph of the smallest size >= b; rows b..B-1 are padding: token 0 at position 0, cache slot -1 (the
// KV write skips it, so no block is touched), one block-table row of zeros (reads only), and their logits ignored.
// Every row's sequence is described with the full width of max_blocks_per_seq entries, so the attention launch
// plan recorded in the graph holds for any context up to max_model_len; the kernels bound each row's reads by its
// position, so the entries past a sequence's table are never read.
#pragma once

#include "model/forward_batch.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace actorllm::model {

/// The largest batch size vLLM captures by default (max_cudagraph_capture_size's cap).
inline constexpr int32_t max_decode_graph_size = 512;

/// The graph sizes for an engine that runs at most `max_num_seqs` sequences per step: vLLM's shape,
/// 1, 2, 4, then 8..248 in steps of 8, then 256..512 in steps of 16, up to the first size >= min(max_num_seqs, `cap`)
/// (so every batch the scheduler can form, up to the cap, has a graph). vLLM captures up to 2 x max_num_seqs for the
/// extra rows of speculative decoding; this engine has none, so the sizes above max_num_seqs would never run. Empty
/// when max_num_seqs < 1 or cap < 1. Sorted ascending.
std::vector<int32_t> decode_graph_sizes(int32_t max_num_seqs, int32_t cap = max_decode_graph_size);

/// The graph size a batch of `n_rows` runs: the smallest of `sizes` (ascending) >= n_rows; 0 when n_rows < 1 or
/// above the largest size (the step runs eagerly).
int32_t padded_graph_size(std::span<const int32_t> sizes, int64_t n_rows);

/// Why a step does not replay a graph.
enum class graph_ineligible {
  none,         ///< it may: every row a decode token of its own sequence, sampled once, in row order
  empty,        ///< no rows
  not_decode,   ///< a sequence with other than one query row (a prefill chunk)
  too_large,    ///< more rows than the largest graph
  sample_rows,  ///< the sampled rows are not exactly the rows in order (the graph returns row r's logits at r)
  too_long,     ///< a block table longer than the graphs' max_blocks_per_seq
};

/// Whether `batch` may replay one of the graphs of `sizes` whose block tables hold `max_blocks_per_seq` entries.
graph_ineligible graph_eligibility(const forward_batch& batch, std::span<const int32_t> sizes,
                                   int64_t max_blocks_per_seq);
/// A short phrase for logs and tests ("a prefill chunk in the batch").
const char* describe(graph_ineligible why);

/// What decides whether a shard captures graphs at all.
struct graph_setting {
  bool enforce_eager = false;  ///< engine_config::enforce_eager (--enforce-eager)
  bool device_graphs = false;  ///< the backend can capture graphs (backend::supports_graphs: CUDA)
  int64_t tp_size = 1;         ///< the TP collectives of today stage through the host: not capturable
  bool single_stage = true;    ///< first and last stage (hidden states between stages cross the host)
  bool moe = false;            ///< MoE layers route on the host
  int32_t max_num_seqs = 0;
};

/// Empty when a shard with `s` captures decode graphs; otherwise why it runs every step eagerly (for its log line).
std::string graphs_disabled_reason(const graph_setting& s);

/// Where each input of a graph of `batch` rows lies in its packed buffer (bytes from its start). The slots (i64)
/// come first so that every array is aligned to its element; then tokens, positions, seqs [batch, 4], sample rows,
/// block tables [batch, max_blocks_per_seq] (all i32). Graphs of every size share one device buffer of the largest
/// size's bytes, each reading it with its own layout.
struct decode_graph_layout {
  int64_t batch = 0;
  int64_t max_blocks_per_seq = 0;
  size_t slots = 0;
  size_t tokens = 0;
  size_t positions = 0;
  size_t seqs = 0;
  size_t sample_rows = 0;
  size_t block_tables = 0;
  size_t bytes = 0;  ///< the whole packed input, uploaded in one copy

  /// The layout of a graph of `batch` rows (batch >= 1, max_blocks_per_seq >= 1).
  static decode_graph_layout make(int64_t batch, int64_t max_blocks_per_seq);
};

/// Packs `batch` (eligible, at most layout.batch rows) into `out` (resized to layout.bytes) for a cache of
/// `block_size`-token blocks: each real row's token, position, slot (block_table[pos / block_size] * block_size +
/// pos % block_size), sequence entry and block table (zeros past its end); padded rows as the header says. Every
/// row's sequence entry is {row, 1, row * max_blocks_per_seq, max_blocks_per_seq}; the sample rows are 0..batch-1.
void pack_decode_inputs(const forward_batch& batch, int64_t block_size, const decode_graph_layout& layout,
                        std::vector<std::byte>& out);

/// The sequence entries of a graph's layout alone (what the attention plan reads on the host), as packed.
std::vector<int32_t> decode_graph_seqs(const decode_graph_layout& layout);

/// The model's shape as the graphs' memory depends on it.
struct decode_graph_dims {
  int64_t n_embd = 0;
  int64_t q_dim = 0;   ///< n_head * head_dim on this rank
  int64_t kv_dim = 0;  ///< n_head_kv * head_dim on this rank
  int64_t n_ff = 0;
  int64_t n_vocab = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 0;
  int64_t sm_count = 132;  ///< the attention plan splits a row only while the grid has fewer CTAs than SMs
};

/// Device memory the graphs keep beside the eager path's, by part.
struct decode_graph_memory {
  size_t inputs = 0;       ///< the packed input buffer of the largest size
  size_t logits = 0;       ///< f32 [largest, n_vocab]
  size_t activations = 0;  ///< the graphs' own activation scratch at the largest size (f32)
  size_t gemm_input = 0;   ///< the graphs' GEMM input conversion scratch (at most f32 [largest, max(n_embd, n_ff)])
  size_t attention = 0;    ///< an upper bound of the split attention workspace over the sizes
  size_t total() const { return inputs + logits + activations + gemm_input + attention; }
};

/// The memory of the graphs of `sizes` (ascending, not empty) for a model of `dims`. The graph objects' own device
/// memory (CUDA's, a few hundred KiB per graph is typical) is not in it: it cannot be known without a GPU.
decode_graph_memory decode_graph_memory_for(std::span<const int32_t> sizes, const decode_graph_dims& dims);

}  // namespace actorllm::model
