// The decode-graph policy on the host: capture sizes (vLLM's shape), padding, eligibility, the packed inputs of one
// upload and the memory the graphs keep.
#include "model/decode_graph_plan.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

using namespace actorllm::model;

namespace {

forward_batch decode_batch(const std::vector<std::vector<int32_t>>& tables, const std::vector<int32_t>& positions) {
  forward_batch b;
  for (size_t s = 0; s < tables.size(); ++s) {
    const int32_t tok = 100 + static_cast<int32_t>(s);
    b.add_sequence(std::vector<int32_t>{tok}, positions[s], tables[s], true);
  }
  return b;
}

template <class T>
std::vector<T> read(const std::vector<std::byte>& bytes, size_t offset, size_t n) {
  std::vector<T> out(n);
  std::memcpy(out.data(), bytes.data() + offset, n * sizeof(T));
  return out;
}

}  // namespace

TEST_CASE("decode graph sizes follow vLLM's shape: 1, 2, 4, steps of 8 to 248, steps of 16 to 512") {
  const std::vector<int32_t> all = decode_graph_sizes(512);
  REQUIRE(all.size() == 51);  // vLLM's count at 512
  CHECK(all[0] == 1);
  CHECK(all[1] == 2);
  CHECK(all[2] == 4);
  CHECK(all[3] == 8);
  CHECK(all[33] == 248);
  CHECK(all[34] == 256);
  CHECK(all[35] == 272);
  CHECK(all.back() == 512);
  for (size_t i = 1; i < all.size(); ++i)
    CHECK(all[i] > all[i - 1]);
  // Up to the first size that holds max_num_seqs.
  CHECK(decode_graph_sizes(1) == std::vector<int32_t>{1});
  CHECK(decode_graph_sizes(3) == std::vector<int32_t>{1, 2, 4});
  CHECK(decode_graph_sizes(8) == std::vector<int32_t>{1, 2, 4, 8});
  CHECK(decode_graph_sizes(9) == std::vector<int32_t>{1, 2, 4, 8, 16});
  CHECK(decode_graph_sizes(256).back() == 256);
  CHECK(decode_graph_sizes(257).back() == 272);
  // Capped at 512 (and by a smaller cap, ending at the cap itself).
  CHECK(decode_graph_sizes(4096).back() == 512);
  CHECK(decode_graph_sizes(4096, 100).back() == 100);
  CHECK(decode_graph_sizes(4096, 100)[decode_graph_sizes(4096, 100).size() - 2] == 96);
  CHECK(decode_graph_sizes(0).empty());
  CHECK(decode_graph_sizes(16, 0).empty());
}

TEST_CASE("a batch runs the graph of the smallest size that holds it, beyond the largest it runs eagerly") {
  const std::vector<int32_t> sizes = decode_graph_sizes(256);
  CHECK(padded_graph_size(sizes, 1) == 1);
  CHECK(padded_graph_size(sizes, 3) == 4);
  CHECK(padded_graph_size(sizes, 5) == 8);
  CHECK(padded_graph_size(sizes, 8) == 8);
  CHECK(padded_graph_size(sizes, 9) == 16);
  CHECK(padded_graph_size(sizes, 249) == 256);
  CHECK(padded_graph_size(sizes, 256) == 256);
  CHECK(padded_graph_size(sizes, 257) == 0);
  CHECK(padded_graph_size(sizes, 0) == 0);
  CHECK(padded_graph_size({}, 1) == 0);
}

TEST_CASE("only all-decode batches within the largest graph, sampled in row order, replay a graph") {
  const std::vector<int32_t> sizes = decode_graph_sizes(8);
  CHECK(graph_eligibility(decode_batch({{3}, {4, 5}, {6}}, {2, 17, 0}), sizes, 4) == graph_ineligible::none);
  CHECK(graph_eligibility(forward_batch{}, sizes, 4) == graph_ineligible::empty);

  forward_batch prefill;
  prefill.add_sequence(std::vector<int32_t>{1, 2, 3}, 0, {7}, true);
  CHECK(graph_eligibility(prefill, sizes, 4) == graph_ineligible::not_decode);
  forward_batch mixed = decode_batch({{3}}, {5});
  mixed.add_sequence(std::vector<int32_t>{1, 2}, 0, {9}, true);
  CHECK(graph_eligibility(mixed, sizes, 4) == graph_ineligible::not_decode);

  std::vector<std::vector<int32_t>> nine(9, std::vector<int32_t>{1});
  CHECK(graph_eligibility(decode_batch(nine, std::vector<int32_t>(9, 0)), sizes, 4) == graph_ineligible::too_large);

  forward_batch unsampled;  // a decode row whose token is not sampled (not what the scheduler sends, but possible)
  unsampled.add_sequence(std::vector<int32_t>{1}, 3, {2}, false);
  CHECK(graph_eligibility(unsampled, sizes, 4) == graph_ineligible::sample_rows);
  forward_batch reordered = decode_batch({{3}, {4}}, {0, 0});
  std::swap(reordered.sample_rows[0], reordered.sample_rows[1]);
  CHECK(graph_eligibility(reordered, sizes, 4) == graph_ineligible::sample_rows);

  CHECK(graph_eligibility(decode_batch({{1, 2, 3, 4, 5}}, {70}), sizes, 4) == graph_ineligible::too_long);
  CHECK(std::string{describe(graph_ineligible::not_decode)} == "a prefill chunk in the batch");
}

TEST_CASE("graphs are captured only on a graph-capable backend, one shard, dense, and not with --enforce-eager") {
  graph_setting s;
  s.device_graphs = true;
  s.max_num_seqs = 8;
  CHECK(graphs_disabled_reason(s).empty());
  graph_setting eager = s;
  eager.enforce_eager = true;
  CHECK(graphs_disabled_reason(eager) == "--enforce-eager");
  graph_setting cpu = s;
  cpu.device_graphs = false;
  CHECK(graphs_disabled_reason(cpu).find("CPU") != std::string::npos);
  graph_setting tp = s;
  tp.tp_size = 2;
  CHECK(graphs_disabled_reason(tp).find("tensor parallel size 2") != std::string::npos);
  graph_setting pp = s;
  pp.single_stage = false;
  CHECK(graphs_disabled_reason(pp).find("pipeline") != std::string::npos);
  graph_setting moe = s;
  moe.moe = true;
  CHECK(graphs_disabled_reason(moe).find("MoE") != std::string::npos);
}

TEST_CASE("the packed inputs: real rows with their slots and tables, padded rows inert, aligned arrays") {
  const decode_graph_layout l = decode_graph_layout::make(4, 3);
  CHECK(l.slots == 0);
  CHECK(l.tokens == 32);
  CHECK(l.positions == 48);
  CHECK(l.seqs == 64);
  CHECK(l.sample_rows == 128);
  CHECK(l.block_tables == 144);
  CHECK(l.bytes == 192);  // 144 + 4 * 3 * 4
  CHECK(l.bytes % 8 == 0);

  // Three rows padded to four, block size 16: row 1 at position 17 is in its second block (5), offset 1.
  const forward_batch b = decode_batch({{3}, {4, 5}, {6, 7, 8}}, {2, 17, 40});
  std::vector<std::byte> packed;
  pack_decode_inputs(b, 16, l, packed);
  REQUIRE(packed.size() == l.bytes);
  CHECK(read<int64_t>(packed, l.slots, 4) == std::vector<int64_t>{3 * 16 + 2, 5 * 16 + 1, 8 * 16 + 8, -1});
  CHECK(read<int32_t>(packed, l.tokens, 4) == std::vector<int32_t>{100, 101, 102, 0});
  CHECK(read<int32_t>(packed, l.positions, 4) == std::vector<int32_t>{2, 17, 40, 0});
  CHECK(read<int32_t>(packed, l.seqs, 16) ==
        std::vector<int32_t>{0, 1, 0, 3, 1, 1, 3, 3, 2, 1, 6, 3, 3, 1, 9, 3});  // every row full width
  CHECK(read<int32_t>(packed, l.sample_rows, 4) == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(read<int32_t>(packed, l.block_tables, 12) == std::vector<int32_t>{3, 0, 0, 4, 5, 0, 6, 7, 8, 0, 0, 0});
  CHECK(decode_graph_seqs(l) == read<int32_t>(packed, l.seqs, 16));

  // Packing again over a buffer that held a larger batch leaves nothing of it behind.
  pack_decode_inputs(decode_batch({{9}}, {1}), 16, l, packed);
  CHECK(read<int64_t>(packed, l.slots, 4) == std::vector<int64_t>{9 * 16 + 1, -1, -1, -1});
  CHECK(read<int32_t>(packed, l.block_tables, 12) == std::vector<int32_t>{9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
}

TEST_CASE("the graphs' memory: inputs and logits of the largest size, its activations, the split workspace bound") {
  decode_graph_dims d;  // Llama-3.1-8B's shape, max_model_len 8192 in blocks of 16
  d.n_embd = 4096;
  d.q_dim = 4096;
  d.kv_dim = 1024;
  d.n_ff = 14336;
  d.n_vocab = 128256;
  d.n_head = 32;
  d.n_head_kv = 8;
  d.head_dim = 128;
  d.max_blocks_per_seq = 512;
  d.block_size = 16;
  const std::vector<int32_t> sizes = decode_graph_sizes(8);  // 1, 2, 4, 8
  const decode_graph_memory m = decode_graph_memory_for(sizes, d);
  CHECK(m.inputs == decode_graph_layout::make(8, 512).bytes);
  CHECK(m.inputs == 8 * (8 + 4 + 4 + 16 + 4) + 8 * 512 * 4);
  CHECK(m.logits == 8u * 128256 * 4);
  CHECK(m.activations == 8u * (3 * 4096 + 2 * 4096 + 2 * 1024 + 2 * 14336) * 4);
  CHECK(m.gemm_input == 8u * 14336 * 2);
  // Sizes 1, 2, 4, 8 all have fewer than 132 CTAs (b x 8 kv heads): the largest, 8, bounds the workspace with
  // 8192 / 128 = 64 partitions.
  CHECK(m.attention == 8u * 32 * 64 * (128 + 2) * 4);
  CHECK(m.total() == m.inputs + m.logits + m.activations + m.gemm_input + m.attention);

  // Sizes whose grid fills the GPU never split; small heads never do.
  const std::vector<int32_t> big{32};
  CHECK(decode_graph_memory_for(big, d).attention == 0);
  decode_graph_dims toy = d;
  toy.head_dim = 8;
  CHECK(decode_graph_memory_for(sizes, toy).attention == 0);
  CHECK(decode_graph_memory_for({}, d).total() == 0);
}
