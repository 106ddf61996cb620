// The decode-graph policy: sizes, padding, eligibility, the packed input layout and the memory the graphs keep.
#include "model/decode_graph_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace actorllm::model {
namespace {

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// vLLM's capture sizes up to max_decode_graph_size: 1, 2, 4, 8..248 step 8, 256..512 step 16.
std::vector<int32_t> all_sizes() {
  std::vector<int32_t> s{1, 2, 4};
  for (int32_t b = 8; b < 256; b += 8)
    s.push_back(b);
  for (int32_t b = 256; b <= max_decode_graph_size; b += 16)
    s.push_back(b);
  return s;
}

}  // namespace

std::vector<int32_t> decode_graph_sizes(int32_t max_num_seqs, int32_t cap) {
  if (max_num_seqs < 1 || cap < 1)
    return {};
  const int32_t want = std::min({max_num_seqs, cap, max_decode_graph_size});
  std::vector<int32_t> out;
  for (int32_t b : all_sizes()) {
    out.push_back(b);
    if (b >= want)
      break;
  }
  // A cap between two table sizes ends the table at the cap's own size rather than above it.
  if (out.back() > cap)
    out.back() = cap;
  return out;
}

int32_t padded_graph_size(std::span<const int32_t> sizes, int64_t n_rows) {
  if (n_rows < 1)
    return 0;
  const auto it = std::lower_bound(sizes.begin(), sizes.end(), n_rows,
                                   [](int32_t size, int64_t rows) { return static_cast<int64_t>(size) < rows; });
  return it == sizes.end() ? 0 : *it;
}

graph_ineligible graph_eligibility(const forward_batch& batch, std::span<const int32_t> sizes,
                                   int64_t max_blocks_per_seq) {
  const int64_t n = batch.n_tokens();
  if (n == 0)
    return graph_ineligible::empty;
  if (static_cast<int64_t>(batch.sequences.size()) != n)
    return graph_ineligible::not_decode;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const batch_sequence& seq = batch.sequences[s];
    if (seq.n_query != 1 || seq.query_begin != static_cast<int32_t>(s))
      return graph_ineligible::not_decode;
  }
  if (padded_graph_size(sizes, n) == 0)
    return graph_ineligible::too_large;
  if (static_cast<int64_t>(batch.sample_rows.size()) != n)
    return graph_ineligible::sample_rows;
  for (int64_t r = 0; r < n; ++r)
    if (batch.sample_rows[static_cast<size_t>(r)] != r)
      return graph_ineligible::sample_rows;
  for (const batch_sequence& seq : batch.sequences)
    if (static_cast<int64_t>(seq.block_table.size()) > max_blocks_per_seq)
      return graph_ineligible::too_long;
  return graph_ineligible::none;
}

const char* describe(graph_ineligible why) {
  switch (why) {
    case graph_ineligible::none:
      return "eligible";
    case graph_ineligible::empty:
      return "an empty batch";
    case graph_ineligible::not_decode:
      return "a prefill chunk in the batch";
    case graph_ineligible::too_large:
      return "more rows than the largest graph";
    case graph_ineligible::sample_rows:
      return "sampled rows other than each row once, in order";
    case graph_ineligible::too_long:
      return "a block table longer than max_model_len";
  }
  return "unknown";
}

std::string graphs_disabled_reason(const graph_setting& s) {
  if (s.enforce_eager)
    return "--enforce-eager";
  if (!s.device_graphs)
    return "the backend has no graphs (CPU)";
  if (s.tp_size > 1)
    return fmt::format("tensor parallel size {}: the TP collectives pass through host memory", s.tp_size);
  if (!s.single_stage)
    return "pipeline parallel: hidden states between stages pass through host memory";
  if (s.moe)
    return "MoE layers route their tokens on the host";
  if (s.max_num_seqs < 1)
    return fmt::format("max_num_seqs {}", s.max_num_seqs);
  return {};
}

decode_graph_layout decode_graph_layout::make(int64_t batch, int64_t max_blocks_per_seq) {
  decode_graph_layout l;
  l.batch = std::max<int64_t>(batch, 1);
  l.max_blocks_per_seq = std::max<int64_t>(max_blocks_per_seq, 1);
  const auto b = static_cast<size_t>(l.batch);
  size_t at = 0;
  l.slots = at;
  at += b * sizeof(int64_t);
  l.tokens = at;
  at += b * sizeof(int32_t);
  l.positions = at;
  at += b * sizeof(int32_t);
  l.seqs = at;
  at += b * 4 * sizeof(int32_t);
  l.sample_rows = at;
  at += b * sizeof(int32_t);
  l.block_tables = at;
  at += b * static_cast<size_t>(l.max_blocks_per_seq) * sizeof(int32_t);
  l.bytes = align_up(at, sizeof(int64_t));
  return l;
}

std::vector<int32_t> decode_graph_seqs(const decode_graph_layout& layout) {
  std::vector<int32_t> seqs(static_cast<size_t>(layout.batch) * 4);
  const auto width = static_cast<int32_t>(layout.max_blocks_per_seq);
  for (int32_t r = 0; r < static_cast<int32_t>(layout.batch); ++r) {
    int32_t* e = seqs.data() + static_cast<size_t>(r) * 4;
    e[0] = r;
    e[1] = 1;
    e[2] = r * width;
    e[3] = width;
  }
  return seqs;
}

void pack_decode_inputs(const forward_batch& batch, int64_t block_size, const decode_graph_layout& layout,
                        std::vector<std::byte>& out) {
  out.assign(layout.bytes, std::byte{0});  // padded rows: token 0, position 0, table of zeros
  const int64_t n = batch.n_tokens();
  auto* slots = reinterpret_cast<int64_t*>(out.data() + layout.slots);
  auto* tokens = reinterpret_cast<int32_t*>(out.data() + layout.tokens);
  auto* positions = reinterpret_cast<int32_t*>(out.data() + layout.positions);
  auto* sample = reinterpret_cast<int32_t*>(out.data() + layout.sample_rows);
  auto* tables = reinterpret_cast<int32_t*>(out.data() + layout.block_tables);
  const std::vector<int32_t> seqs = decode_graph_seqs(layout);
  std::memcpy(out.data() + layout.seqs, seqs.data(), seqs.size() * sizeof(int32_t));
  for (int64_t r = 0; r < layout.batch; ++r) {
    sample[r] = static_cast<int32_t>(r);
    slots[r] = -1;  // a padded row writes no KV
  }
  for (int64_t r = 0; r < n && r < layout.batch; ++r) {
    const batch_sequence& seq = batch.sequences[static_cast<size_t>(r)];
    const int32_t pos = batch.positions[static_cast<size_t>(r)];
    tokens[r] = batch.tokens[static_cast<size_t>(r)];
    positions[r] = pos;
    slots[r] =
        static_cast<int64_t>(seq.block_table[static_cast<size_t>(pos / block_size)]) * block_size + pos % block_size;
    std::copy(seq.block_table.begin(), seq.block_table.end(), tables + r * layout.max_blocks_per_seq);
  }
}

decode_graph_memory decode_graph_memory_for(std::span<const int32_t> sizes, const decode_graph_dims& d) {
  decode_graph_memory m;
  if (sizes.empty())
    return m;
  const auto largest = static_cast<size_t>(sizes.back());
  m.inputs = decode_graph_layout::make(sizes.back(), d.max_blocks_per_seq).bytes;
  m.logits = largest * static_cast<size_t>(d.n_vocab) * sizeof(float);
  const int64_t n_ff = std::max<int64_t>(d.n_ff, 1);
  m.activations = largest * static_cast<size_t>(3 * d.n_embd + 2 * d.q_dim + 2 * d.kv_dim + 2 * n_ff) * sizeof(float);
  // f16/bf16 weights: the input converted to 2-byte elements (graph scratch is allocated at its exact size).
  m.gemm_input = largest * static_cast<size_t>(std::max({d.n_embd, d.q_dim, n_ff})) * 2;
  // The split attention (kernels/cuda/attention_plan): a size splits only while its grid has fewer CTAs than SMs
  // and a row may read more than 512 positions; its partitions are at least 128 positions, and at most 12288 (the
  // merge's shared memory). Heads narrower than 32 take the unsplit small-head kernel.
  const int64_t longest = d.max_blocks_per_seq * d.block_size;
  if (d.head_dim >= 32 && d.n_head_kv > 0 && longest > 512) {
    const int64_t n_part = std::min<int64_t>(ceil_div(longest, 128), 12288);
    for (int32_t b : sizes)
      if (b * d.n_head_kv < d.sm_count)
        m.attention =
            std::max(m.attention, static_cast<size_t>(b) * static_cast<size_t>(d.n_head) * static_cast<size_t>(n_part) *
                                      static_cast<size_t>(d.head_dim + 2) * sizeof(float));
  }
  return m;
}

}  // namespace actorllm::model
