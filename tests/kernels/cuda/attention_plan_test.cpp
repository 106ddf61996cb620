// The paged-attention launch plan (host only): grid geometry, the split-K rule at decode b1 128 / 4K / 32K, b256
// decode, mixed prefill + decode, sliding windows, GQA head chunks, shared memory and workspace bytes, and the
// argument checks.
#include "kernels/cuda/attention_plan.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

namespace {

using actorllm::cuda::attention_geometry;
using actorllm::cuda::attention_plan;
using actorllm::cuda::attention_plan_options;
using actorllm::cuda::device_limits;
using actorllm::cuda::plan_paged_attention;
using actorllm::cuda::split_policy;

// A batch of sequences given as (n_query, context): rows back to back, each with ceil(context / block_size) blocks.
struct batch {
  std::vector<int32_t> seqs;
  int64_t n_tokens = 0;
  int64_t n_table = 0;
};

batch make_batch(const std::vector<std::pair<int32_t, int32_t>>& query_context, int32_t block_size) {
  batch b;
  for (const auto& [n_query, context] : query_context) {
    const int32_t nb = (context + block_size - 1) / block_size;
    b.seqs.insert(b.seqs.end(), {static_cast<int32_t>(b.n_tokens), n_query, static_cast<int32_t>(b.n_table), nb});
    b.n_tokens += n_query;
    b.n_table += nb;
  }
  return b;
}

// Llama-3.1-8B's attention: 32 query heads, 8 kv heads, head_dim 128, blocks of 16.
attention_geometry llama8b(int64_t n_tokens, int64_t window = 0) { return {n_tokens, 32, 8, 128, 16, window}; }

attention_plan plan_for(const attention_geometry& g, const batch& b, const attention_plan_options& options = {},
                        const device_limits& limits = {}) {
  return plan_paged_attention(g, b.seqs.data(), static_cast<int64_t>(b.seqs.size() / 4), b.n_table, limits, options);
}

int64_t split_workspace(const attention_plan& p) {
  const attention_geometry& g = p.geometry;
  return g.n_tokens * g.n_head * p.n_partitions * (g.head_dim + 2) * 4;
}

}  // namespace

TEST_CASE("plan: decode b1 at 128 context runs unsplit, one CTA per kv head") {
  const batch b = make_batch({{1, 128}}, 16);
  const attention_plan p = plan_for(llama8b(b.n_tokens), b);
  CHECK_FALSE(p.empty());
  CHECK_FALSE(p.split);
  CHECK(p.cache_limit == 128);
  CHECK(p.head_chunk == 4);  // the GQA group of 4 in one CTA
  CHECK(p.n_head_chunks == 1);
  CHECK(p.grid[0] == 1);
  CHECK(p.grid[1] == 8);
  CHECK(p.grid[2] == 1);
  CHECK(p.threads == 128);
  CHECK(p.partition_size >= 128);
  CHECK(p.workspace_bytes == 0);
  CHECK(p.shared_bytes == actorllm::cuda::attention_shared_bytes(128));
  CHECK(p.shared_bytes <= device_limits{}.max_shared_bytes_per_block);
}

TEST_CASE("plan: decode b1 at 4K context splits into partitions of 128 to fill the GPU") {
  const batch b = make_batch({{1, 4096}}, 16);
  const attention_plan p = plan_for(llama8b(b.n_tokens), b);
  CHECK(p.split);
  CHECK(p.partition_size == 128);  // 512 -> 256 -> 128 while 8 CTAs x partitions < 132 SMs
  CHECK(p.n_partitions == 32);
  CHECK(p.grid[0] * p.grid[1] * p.grid[2] == 256);
  CHECK(p.merge_grid[0] == 1);
  CHECK(p.merge_grid[1] == 32);
  CHECK(p.merge_shared_bytes == 32 * 4);  // 8 whole vectors of 4 weights
  CHECK(p.workspace_bytes == split_workspace(p));
  CHECK(p.workspace_max_offset == 1 * 32 * 32 * 128 * 4);
  CHECK(p.workspace_sum_offset == p.workspace_max_offset + 32 * 32 * 4);
}

TEST_CASE("plan: decode b1 at 32K context splits into 64 partitions of 512") {
  const batch b = make_batch({{1, 32768}}, 16);
  const attention_plan p = plan_for(llama8b(b.n_tokens), b);
  CHECK(p.split);
  CHECK(p.partition_size == 512);
  CHECK(p.n_partitions == 64);
  CHECK(p.grid[2] == 64);
  CHECK(p.workspace_bytes == 1 * 32 * 64 * 130 * 4);
}

TEST_CASE("plan: decode b256 at 4K context fills the GPU without a split") {
  std::vector<std::pair<int32_t, int32_t>> rows(256, {1, 4096});
  const batch b = make_batch(rows, 16);
  const attention_plan p = plan_for(llama8b(b.n_tokens), b);
  CHECK_FALSE(p.split);
  CHECK(p.grid[0] == 256);
  CHECK(p.grid[1] == 8);
  CHECK(p.grid[2] == 1);
  CHECK(p.workspace_bytes == 0);
}

TEST_CASE("plan: a small decode batch at long context still splits, and forcing works both ways") {
  std::vector<std::pair<int32_t, int32_t>> rows(16, {1, 8192});
  const batch b = make_batch(rows, 16);
  const attention_plan automatic = plan_for(llama8b(b.n_tokens), b);  // 16 x 8 = 128 CTAs < 132
  CHECK(automatic.split);
  CHECK(automatic.partition_size == 512);
  attention_plan_options never;
  never.split = split_policy::never;
  CHECK_FALSE(plan_for(llama8b(b.n_tokens), b, never).split);
  attention_plan_options always;
  always.split = split_policy::always;
  always.partition_size = 1000;
  const attention_plan forced = plan_for(llama8b(b.n_tokens), b, always);
  CHECK(forced.split);
  CHECK(forced.partition_size == 1000);
  CHECK(forced.n_partitions == 9);
  CHECK(forced.workspace_bytes == split_workspace(forced));
}

TEST_CASE("plan: mixed prefill and decode rows share one grid over all rows") {
  const batch b = make_batch({{512, 512}, {1, 3000}, {1, 40}, {100, 900}}, 16);
  const attention_plan p = plan_for(llama8b(b.n_tokens), b);
  CHECK(p.n_seqs == 4);
  CHECK_FALSE(p.split);  // 614 rows x 8 kv heads fill the GPU
  CHECK(p.grid[0] == 614);
  CHECK(p.grid[1] == 8);
  CHECK(p.cache_limit == 3008);  // the longest table: 188 blocks of 16
  CHECK(p.partition_size >= p.cache_limit);
}

TEST_CASE("plan: a sliding window bounds the partitions by the window, not the context") {
  const batch b = make_batch({{1, 32768}}, 16);
  const attention_plan p = plan_for(llama8b(b.n_tokens, 4096), b);
  CHECK(p.cache_limit == 4096);
  CHECK(p.split);
  CHECK(p.partition_size == 128);
  CHECK(p.n_partitions == 32);
  const attention_plan short_window = plan_for(llama8b(b.n_tokens, 300), b);
  CHECK(short_window.cache_limit == 300);
  CHECK_FALSE(short_window.split);
}

TEST_CASE("plan: GQA groups are cut into head chunks by head_dim") {
  const batch b = make_batch({{3, 100}}, 16);
  attention_plan p = plan_for({b.n_tokens, 64, 1, 128, 16, 0}, b);  // MQA: 64 heads on one kv head
  CHECK(p.head_chunk == 8);
  CHECK(p.n_head_chunks == 8);
  CHECK(p.grid[1] == 8);
  p = plan_for({b.n_tokens, 28, 4, 128, 16, 0}, b);  // Qwen2-7B: groups of 7
  CHECK(p.head_chunk == 7);
  CHECK(p.n_head_chunks == 1);
  CHECK(p.grid[1] == 4);
  p = plan_for({b.n_tokens, 32, 4, 256, 16, 0}, b);  // groups of 8 at head_dim 256: chunks of 4
  CHECK(p.head_chunk == 4);
  CHECK(p.n_head_chunks == 2);
  CHECK(p.grid[1] == 8);
  p = plan_for({b.n_tokens, 8, 8, 64, 16, 0}, b);  // no GQA
  CHECK(p.head_chunk == 1);
  CHECK(p.grid[1] == 8);
}

TEST_CASE("plan: shared memory of every supported head_dim fits the default 48 KiB, and a smaller limit is refused") {
  const batch b = make_batch({{1, 100}}, 16);
  for (int64_t hd = 32; hd <= 256; hd += 32) {
    const attention_plan p = plan_for({b.n_tokens, 8, 2, hd, 16, 0}, b);
    CHECK(p.shared_bytes <= 48 * 1024);
  }
  device_limits small;
  small.max_shared_bytes_per_block = 8 * 1024;
  CHECK_THROWS_WITH_AS(plan_for(llama8b(b.n_tokens), b, {}, small), doctest::Contains("shared memory"),
                       std::invalid_argument);
}

TEST_CASE("plan: too many forced partitions for the merge are refused, automatic ones grow instead") {
  const batch b = make_batch({{1, 100000}}, 16);
  attention_plan_options tiny;
  tiny.split = split_policy::always;
  tiny.partition_size = 1;
  CHECK_THROWS_WITH_AS(plan_for(llama8b(b.n_tokens), b, tiny), doctest::Contains("partition_size"),
                       std::invalid_argument);
  // 2M positions in partitions of 128 would need 62.5 KiB of merge weights: the partition grows to 256.
  const batch huge = make_batch({{1, 2000000}}, 16);
  device_limits many_sms;
  many_sms.sm_count = 100000;  // asks for the smallest partitions
  const attention_plan p = plan_for(llama8b(huge.n_tokens), huge, {}, many_sms);
  CHECK(p.split);
  CHECK(p.partition_size == 256);
  CHECK(p.merge_shared_bytes <= many_sms.max_shared_bytes_per_block);
}

TEST_CASE("plan: an empty batch launches nothing") {
  const batch none = make_batch({}, 16);
  CHECK(plan_for(llama8b(0), none).empty());
  const batch idle = make_batch({{0, 64}}, 16);
  const attention_plan p = plan_for(llama8b(4), idle);  // rows but no query rows in any sequence
  CHECK_FALSE(p.split);
  CHECK(p.grid[0] == 4);
}

TEST_CASE("plan: bad arguments are refused by name") {
  const batch b = make_batch({{2, 40}}, 16);
  auto plan_geometry = [&](attention_geometry g) { return plan_for(g, b); };
  CHECK_THROWS_WITH_AS(plan_geometry({2, 32, 8, 80, 16, 0}), doctest::Contains("head_dim 80"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan_geometry({2, 32, 8, 512, 16, 0}), doctest::Contains("head_dim"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan_geometry({2, 30, 8, 128, 16, 0}), doctest::Contains("n_head 30"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan_geometry({2, 32, 0, 128, 16, 0}), doctest::Contains("n_head_kv"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan_geometry({2, 32, 8, 128, 0, 0}), doctest::Contains("block_size"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan_geometry({-1, 32, 8, 128, 16, 0}), doctest::Contains("n_tokens"), std::invalid_argument);
  // Rows past n_tokens, blocks past the table, negative fields.
  CHECK_THROWS_WITH_AS(plan_geometry(llama8b(1)), doctest::Contains("sequence 0"), std::invalid_argument);
  std::vector<int32_t> seqs = {0, 2, 0, 4};  // 4 blocks, but the table has 3
  CHECK_THROWS_WITH_AS(plan_paged_attention(llama8b(2), seqs.data(), 1, 3), doctest::Contains("host_seqs"),
                       std::invalid_argument);
  seqs = {-1, 1, 0, 1};
  CHECK_THROWS_AS(plan_paged_attention(llama8b(2), seqs.data(), 1, 3), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan_paged_attention(llama8b(2), nullptr, 1, 3), doctest::Contains("n_seqs"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan_paged_attention(llama8b(2), seqs.data(), 0, -1), doctest::Contains("n_block_table"),
                       std::invalid_argument);
  attention_plan_options negative;
  negative.partition_size = -5;
  CHECK_THROWS_WITH_AS(plan_for(llama8b(2), b, negative), doctest::Contains("partition_size"), std::invalid_argument);
}

// The first GPU run's memcheck: the merge kernel read 12 bytes at the start of an 8-byte weight array (2 partitions):
// the compiled kernel loads the loop's remainder (up to 3 weights) at once. Every partition count gets whole vectors.
TEST_CASE("plan: the merge's shared weights are whole 16-byte vectors, for every partition count") {
  for (int32_t context : {129, 257, 300, 385, 513, 1000, 4096}) {
    CAPTURE(context);
    const batch b = make_batch({{1, context}}, 16);
    attention_plan_options options;
    options.split = split_policy::always;
    options.partition_size = 128;
    const attention_plan p = plan_for(llama8b(b.n_tokens), b, options);
    REQUIRE(p.split);
    CHECK(p.n_partitions == (context + 127) / 128);
    CHECK(p.merge_shared_bytes % 16 == 0);
    CHECK(p.merge_shared_bytes >= p.n_partitions * 4);
    CHECK(p.merge_shared_bytes < p.n_partitions * 4 + 16);
  }
}
