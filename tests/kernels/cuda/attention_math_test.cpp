// The CUDA paged attention's math on the CPU: the kernels' loop structure (grid from the plan, partitions, tiles of
// attention_tile positions, online softmax per tile, log-sum-exp merge of the partitions) emulated with the very
// attention_math.hpp functions the kernels call, compared with kernels/cpu's paged_attention over random paged
// caches with shuffled block tables, GQA, windows and split-K forced on and off. Plus unit cases for each function.
#include "kernels/cuda/attention_math.hpp"
#include "kernels/cuda/attention_plan.hpp"

#include "paged_batch_fixture.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

namespace attn = actorllm::cuda::attn;
using actorllm::kv_shard_layout;
using actorllm::cuda::attention_plan;
using actorllm::cuda::attention_plan_options;
using actorllm::cuda::split_policy;
using actorllm::cuda_test::make_paged_batch;
using actorllm::cuda_test::paged_batch;
using actorllm::cuda_test::seq_spec;

// What the attention kernel and the merge kernel compute, CTA by CTA, in the order of their loops (the sums of a
// CTA's warps are done in a different order on the GPU; that only changes rounding). Also checks that no table
// entry before a row's first block is read.
std::vector<float> emulate_kernels(const attention_plan& plan, const paged_batch& b) {
  const int64_t hd = b.head_dim, n_head = b.n_head;
  std::vector<float> out(b.q.size(), paged_batch::untouched);
  const int64_t n_partials = b.n_tokens * n_head * plan.n_partitions;
  std::vector<float> ws_acc(static_cast<size_t>(plan.split ? n_partials * hd : 0), std::nanf(""));
  std::vector<float> ws_max(static_cast<size_t>(plan.split ? n_partials : 0), std::nanf(""));
  std::vector<float> ws_sum(ws_max.size(), std::nanf(""));
  const auto partition_size = static_cast<int32_t>(plan.partition_size);
  const auto n_partitions = static_cast<int32_t>(plan.n_partitions);

  auto find_sequence = [&](int64_t row) -> int64_t {
    for (int64_t s = 0; s < b.n_seqs(); ++s)
      if (attn::row_in_sequence(b.seqs.data() + 4 * s, row))
        return s;
    return -1;
  };

  for (int64_t row = 0; row < plan.grid[0]; ++row) {
    const int64_t s = find_sequence(row);
    if (s < 0)
      continue;
    const int32_t* seq = b.seqs.data() + 4 * s;
    const int32_t* table = b.block_tables.data() + seq[2];
    const attn::row_range range =
        attn::query_row_range(b.positions[static_cast<size_t>(row)], b.window, seq[3], b.block_size);
    for (int64_t y = 0; y < plan.grid[1]; ++y) {
      const attn::head_group group =
          attn::head_group_of(static_cast<int32_t>(y), static_cast<int32_t>(n_head), static_cast<int32_t>(b.n_head_kv),
                              static_cast<int32_t>(plan.head_chunk));
      REQUIRE(group.n_heads >= 1);
      REQUIRE(group.n_heads <= plan.head_chunk);
      const int64_t out_row = row * n_head + group.first_head;
      if (!range.valid || attn::partition_count(range, partition_size) > n_partitions) {
        for (int64_t i = 0; i < group.n_heads * hd; ++i)
          out[static_cast<size_t>(out_row * hd + i)] = NAN;
        continue;
      }
      for (int32_t part = 0; part < plan.grid[2]; ++part) {
        const attn::position_span span = attn::partition_span(range, part, partition_size);
        if (span.begin >= span.end)
          continue;
        std::vector<attn::softmax_state> state(static_cast<size_t>(group.n_heads), attn::softmax_start());
        std::vector<float> acc(static_cast<size_t>(group.n_heads * hd), 0.0f);
        std::vector<float> scores(static_cast<size_t>(actorllm::cuda::attention_tile));
        for (int32_t tile = span.begin; tile < span.end; tile += actorllm::cuda::attention_tile) {
          const int n = static_cast<int>(std::min<int64_t>(actorllm::cuda::attention_tile, span.end - tile));
          for (int j = 0; j < group.n_heads; ++j) {
            const float* q = b.q.data() + (out_row + j) * hd;
            for (int t = 0; t < n; ++t) {
              const attn::block_slot slot = attn::block_slot_of(tile + t, static_cast<int32_t>(b.block_size));
              REQUIRE(slot.table_index >= attn::first_block(range, static_cast<int32_t>(b.block_size)));
              REQUIRE(slot.table_index < seq[3]);
              const int64_t block = table[slot.table_index];
              if (!attn::block_in_cache(block, b.n_blocks)) {
                scores[static_cast<size_t>(t)] = NAN;
                continue;
              }
              const float* k = b.k_cache.data() +
                               attn::cache_offset(block, slot.offset, b.block_size, b.n_head_kv, group.kv_head, hd);
              float dot = 0.0f;
              for (int64_t e = 0; e < hd; ++e)
                dot = std::fma(q[e], k[e], dot);
              scores[static_cast<size_t>(t)] = dot * b.scale;
            }
            float tile_max = -INFINITY;
            for (int t = 0; t < n; ++t)
              tile_max = fmaxf(tile_max, scores[static_cast<size_t>(t)]);
            attn::softmax_state& st = state[static_cast<size_t>(j)];
            const float correction = attn::softmax_rescale(st, tile_max);
            float sum = 0.0f;
            float* a = acc.data() + j * hd;
            for (int64_t e = 0; e < hd; ++e)
              a[e] *= correction;
            for (int t = 0; t < n; ++t) {
              const float w = attn::softmax_weight(st, scores[static_cast<size_t>(t)]);
              sum += w;
              const attn::block_slot slot = attn::block_slot_of(tile + t, static_cast<int32_t>(b.block_size));
              const int64_t block = table[slot.table_index];
              if (!attn::block_in_cache(block, b.n_blocks)) {
                for (int64_t e = 0; e < hd; ++e)
                  a[e] = NAN;
                continue;
              }
              const float* v = b.v_cache.data() +
                               attn::cache_offset(block, slot.offset, b.block_size, b.n_head_kv, group.kv_head, hd);
              for (int64_t e = 0; e < hd; ++e)
                a[e] = std::fma(w, v[e], a[e]);
            }
            st.sum += sum;
          }
        }
        for (int j = 0; j < group.n_heads; ++j) {
          const attn::softmax_state& st = state[static_cast<size_t>(j)];
          if (!plan.split) {
            for (int64_t e = 0; e < hd; ++e)
              out[static_cast<size_t>((out_row + j) * hd + e)] = acc[static_cast<size_t>(j * hd + e)] * (1.0f / st.sum);
          } else {
            const int64_t index = (out_row + j) * plan.n_partitions + part;
            for (int64_t e = 0; e < hd; ++e)
              ws_acc[static_cast<size_t>(index * hd + e)] = acc[static_cast<size_t>(j * hd + e)];
            ws_max[static_cast<size_t>(index)] = st.max;
            ws_sum[static_cast<size_t>(index)] = st.sum;
          }
        }
      }
    }
  }
  if (!plan.split)
    return out;

  for (int64_t row = 0; row < plan.merge_grid[0]; ++row) {
    const int64_t s = find_sequence(row);
    if (s < 0)
      continue;
    const int32_t* seq = b.seqs.data() + 4 * s;
    const attn::row_range range =
        attn::query_row_range(b.positions[static_cast<size_t>(row)], b.window, seq[3], b.block_size);
    for (int64_t head = 0; head < plan.merge_grid[1]; ++head) {
      float* o = out.data() + (row * n_head + head) * hd;
      const int32_t count = range.valid ? attn::partition_count(range, partition_size) : 0;
      if (!range.valid || count > n_partitions) {
        std::fill(o, o + hd, NAN);
        continue;
      }
      const int64_t base = (row * n_head + head) * plan.n_partitions;
      float global_max = -INFINITY;
      for (int32_t i = 0; i < count; ++i)
        global_max = fmaxf(global_max, ws_max[static_cast<size_t>(base + i)]);
      std::vector<float> weights(static_cast<size_t>(count));
      float total = 0.0f;
      for (int32_t i = 0; i < count; ++i) {
        weights[static_cast<size_t>(i)] = attn::partition_weight(ws_max[static_cast<size_t>(base + i)], global_max);
        total += weights[static_cast<size_t>(i)] * ws_sum[static_cast<size_t>(base + i)];
      }
      for (int64_t e = 0; e < hd; ++e) {
        float sum = 0.0f;
        for (int32_t i = 0; i < count; ++i)
          sum += weights[static_cast<size_t>(i)] * ws_acc[static_cast<size_t>((base + i) * hd + e)];
        o[e] = sum * (1.0f / total);
      }
    }
  }
  return out;
}

// Emulates the kernels for the batch under the plan's rule and under forced splits, against the CPU reference.
void check_emulation(const paged_batch& b, split_policy split, int64_t partition_size) {
  attention_plan_options options;
  options.split = split;
  options.partition_size = partition_size;
  const attention_plan plan = actorllm::cuda::plan_paged_attention(
      b.geometry(), b.seqs.data(), b.n_seqs(), static_cast<int64_t>(b.block_tables.size()), {}, options);
  const std::vector<float> out = emulate_kernels(plan, b);
  std::string worst;
  // The emulation and the CPU kernel are both f32 with different summation orders and exp implementations.
  const int64_t bad = actorllm::cuda_test::count_mismatches(b, out, 2e-6, 5e-5, &worst);
  INFO(b.describe() << " split " << plan.split << " partition " << plan.partition_size << " x " << plan.n_partitions);
  INFO(worst);
  CHECK(bad == 0);
}

void check_all_splits(const paged_batch& b) {
  check_emulation(b, split_policy::automatic, 0);
  check_emulation(b, split_policy::never, 0);
  check_emulation(b, split_policy::always, 0);
  check_emulation(b, split_policy::always, 7);   // partitions that straddle tiles and blocks
  check_emulation(b, split_policy::always, 64);  // exactly one tile
  check_emulation(b, split_policy::always, 100);
}

// Decode rows, a prefill chunk in the middle of a sequence, a whole prompt from position 0, a one-token sequence.
const std::vector<seq_spec> mixed = {{37, 1}, {23, 6}, {19, 19}, {1, 1}, {150, 1}, {33, 4}};

}  // namespace

TEST_CASE("online softmax over tiles equals one softmax over all scores") {
  const std::vector<float> scores = {0.5f, -3.0f, 12.0f, 11.5f, -40.0f, 2.0f, 12.25f, 0.0f, -1.0f};
  double max = -INFINITY, sum = 0;
  for (float s : scores)
    max = std::max<double>(max, s);
  for (float s : scores)
    sum += std::exp(s - max);
  for (size_t tile : {1u, 2u, 4u, 9u}) {
    attn::softmax_state st = attn::softmax_start();
    for (size_t begin = 0; begin < scores.size(); begin += tile) {
      const size_t end = std::min(scores.size(), begin + tile);
      float tile_max = -INFINITY;
      for (size_t i = begin; i < end; ++i)
        tile_max = fmaxf(tile_max, scores[i]);
      attn::softmax_rescale(st, tile_max);
      for (size_t i = begin; i < end; ++i)
        st.sum += attn::softmax_weight(st, scores[i]);
    }
    CHECK(st.max == doctest::Approx(max));
    CHECK(st.sum == doctest::Approx(sum).epsilon(1e-6));
  }
}

TEST_CASE("softmax_rescale returns the factor for the accumulator and never NaN from an empty start") {
  attn::softmax_state st = attn::softmax_start();
  CHECK(attn::softmax_rescale(st, -INFINITY) == 1.0f);  // nothing seen yet: no exp(-inf - -inf)
  CHECK(st.sum == 0.0f);
  CHECK(attn::softmax_rescale(st, 2.0f) == 0.0f);  // exp(-inf - 2): the empty accumulator is dropped
  st.sum = 3.0f;
  const float c = attn::softmax_rescale(st, 5.0f);
  CHECK(c == doctest::Approx(std::exp(-3.0)));
  CHECK(st.sum == doctest::Approx(3.0 * std::exp(-3.0)));
  CHECK(attn::softmax_rescale(st, 1.0f) == 1.0f);  // a lower tile max keeps the max
  // A NaN score (a block id outside the cache) leaves the max alone but poisons the weights.
  CHECK(attn::softmax_rescale(st, NAN) == 1.0f);
  CHECK(std::isnan(attn::softmax_weight(st, NAN)));
}

TEST_CASE("the log-sum-exp merge of partitions equals the unsplit softmax") {
  // Three partitions of scores with very different maxima, plus an empty one.
  const std::vector<std::vector<float>> parts = {{1.0f, 2.0f}, {30.0f, 29.0f, -5.0f}, {}, {-10.0f}};
  const std::vector<float> values = {0.25f, -1.0f, 2.0f, 0.5f, 3.0f, -4.0f};  // a 1-wide "v" per position
  double max = -INFINITY, sum = 0, num = 0;
  size_t k = 0;
  for (const auto& p : parts)
    for (float s : p)
      max = std::max<double>(max, s);
  std::vector<float> part_max, part_sum, part_acc;
  for (const auto& p : parts) {
    attn::softmax_state st = attn::softmax_start();
    float tile_max = -INFINITY;
    for (float s : p)
      tile_max = fmaxf(tile_max, s);
    attn::softmax_rescale(st, tile_max);
    float acc = 0.0f;
    for (float s : p) {
      const float w = attn::softmax_weight(st, s);
      st.sum += w;
      acc += w * values[k];
      sum += std::exp(s - max);
      num += std::exp(s - max) * values[k];
      ++k;
    }
    part_max.push_back(st.max);
    part_sum.push_back(st.sum);
    part_acc.push_back(acc);
  }
  float global_max = -INFINITY;
  for (float m : part_max)
    global_max = fmaxf(global_max, m);
  float total = 0.0f, merged = 0.0f;
  for (size_t i = 0; i < parts.size(); ++i) {
    const float w = attn::partition_weight(part_max[i], global_max);
    total += w * part_sum[i];
    merged += w * part_acc[i];
  }
  CHECK(attn::partition_weight(-INFINITY, global_max) == 0.0f);
  CHECK(merged / total == doctest::Approx(num / sum).epsilon(1e-6));
}

TEST_CASE("query_row_range is causal, clips the window at 0 and flags positions outside the blocks") {
  auto r = attn::query_row_range(10, 0, 2, 8);
  CHECK(r.first == 0);
  CHECK(r.last == 10);
  CHECK(r.valid);
  r = attn::query_row_range(10, 4, 2, 8);  // [7, 10]: the window starts in block 0, mid-block
  CHECK(r.first == 7);
  CHECK(attn::first_block(r, 8) == 0);
  r = attn::query_row_range(13, 4, 2, 8);  // [10, 13]: block 0 lies wholly before the window
  CHECK(r.first == 10);
  CHECK(attn::first_block(r, 8) == 1);
  r = attn::query_row_range(3, 100, 2, 8);
  CHECK(r.first == 0);
  r = attn::query_row_range(0, 1, 1, 8);
  CHECK(r.first == 0);
  CHECK(r.last == 0);
  CHECK_FALSE(attn::query_row_range(16, 0, 2, 8).valid);  // past the sequence's 2 blocks
  CHECK_FALSE(attn::query_row_range(-1, 0, 2, 8).valid);
}

TEST_CASE("local_row_range maps a row's window to the keys one DCP rank keeps, empty where it keeps none") {
  // Plain: the range as it is.
  const attn::row_range plain = attn::query_row_range(10, 4, 2, 8);
  const attn::row_range same = attn::local_row_range(plain, 10, kv_shard_layout{}, 2, 8);
  CHECK(same.first == plain.first);
  CHECK(same.last == plain.last);
  CHECK(same.valid == plain.valid);
  // Every (layout, position, window): the local indices are exactly those of the kept positions of the window, and
  // a rank's blocks of 8 slots hold them while the position's virtual blocks (8 x n positions) do.
  for (int32_t n : {2, 3, 4})
    for (int32_t interleave : {1, 2, 4})
      for (int32_t shard = 0; shard < n; ++shard) {
        const kv_shard_layout l{n, shard, interleave};
        for (int32_t position = 0; position < 70; ++position)
          for (int64_t window : {0, 1, 5, 16}) {
            const int64_t n_seq_blocks = position / (8 * n) + 1;
            const attn::row_range r = attn::local_row_range(attn::query_row_range(position, window, n_seq_blocks, 8),
                                                            position, l, n_seq_blocks, 8);
            std::vector<int64_t> want;
            const int64_t first = window > 0 ? std::max<int64_t>(0, position - window + 1) : 0;
            for (int64_t p = first; p <= position; ++p)
              if (l.owns(p))
                want.push_back(l.local_count(p));
            CHECK(r.valid);
            CHECK(attn::range_empty(r) == want.empty());
            if (!want.empty()) {
              CHECK(r.first == want.front());
              CHECK(r.last == want.back());
              CHECK(static_cast<int64_t>(r.last - r.first + 1) == static_cast<int64_t>(want.size()));
              CHECK(attn::partition_count(r, 16) >= 1);
            } else {
              CHECK(attn::partition_count(r, 16) == 0);
            }
          }
      }
  // A position whose local indices would pass the sequence's blocks is flagged, as a negative one.
  const kv_shard_layout two{2, 0, 1};
  CHECK_FALSE(attn::local_row_range(attn::query_row_range(40, 0, 2, 8), 40, two, 2, 8).valid);  // 21 keys, 16 slots
  CHECK(attn::local_row_range(attn::query_row_range(31, 0, 2, 8), 31, two, 2, 8).valid);        // 16 keys
  CHECK_FALSE(attn::local_row_range(attn::query_row_range(-1, 0, 2, 8), -1, two, 2, 8).valid);
}

TEST_CASE("partitions cover a row's range exactly once") {
  for (int32_t size : {1, 3, 64, 512}) {
    for (int32_t first : {0, 5, 511}) {
      for (int32_t len : {1, 2, 63, 64, 65, 1000}) {
        const attn::row_range r{first, first + len - 1, true};
        const int32_t count = attn::partition_count(r, size);
        int64_t covered = 0, expect_begin = first;
        for (int32_t p = 0; p < count; ++p) {
          const attn::position_span s = attn::partition_span(r, p, size);
          CHECK(s.begin == expect_begin);
          CHECK(s.end > s.begin);
          CHECK(s.end - s.begin <= size);
          covered += s.end - s.begin;
          expect_begin = s.end;
        }
        CHECK(covered == len);
        const attn::position_span past = attn::partition_span(r, count, size);
        CHECK(past.begin >= past.end);
      }
    }
  }
}

TEST_CASE("head_group_of cuts each GQA group into chunks and maps query heads to their kv head") {
  for (int32_t n_head_kv : {1, 2, 8}) {
    for (int32_t gqa : {1, 4, 7, 8, 12, 64}) {
      for (int32_t chunk : {4, 8}) {
        const int32_t n_head = n_head_kv * gqa;
        const int32_t eff_chunk = std::min(chunk, gqa);
        const int32_t n_chunks = (gqa + eff_chunk - 1) / eff_chunk;
        std::vector<int> seen(static_cast<size_t>(n_head), 0);
        for (int32_t y = 0; y < n_head_kv * n_chunks; ++y) {
          const attn::head_group g = attn::head_group_of(y, n_head, n_head_kv, eff_chunk);
          CHECK(g.n_heads >= 1);
          CHECK(g.n_heads <= eff_chunk);
          for (int32_t h = g.first_head; h < g.first_head + g.n_heads; ++h) {
            ++seen[static_cast<size_t>(h)];
            CHECK(attn::kv_head_of(h, n_head, n_head_kv) == g.kv_head);
          }
        }
        for (int c : seen)
          CHECK(c == 1);
      }
    }
  }
}

TEST_CASE("block_slot_of and cache_offset address the paged layout") {
  const attn::block_slot s = attn::block_slot_of(37, 16);
  CHECK(s.table_index == 2);
  CHECK(s.offset == 5);
  // [n_blocks, block_size 16, n_head_kv 4, head_dim 64]: block 9, offset 5, kv head 3.
  CHECK(attn::cache_offset(9, 5, 16, 4, 3, 64) == ((9 * 16 + 5) * 4 + 3) * 64);
  CHECK(attn::block_in_cache(0, 3));
  CHECK_FALSE(attn::block_in_cache(3, 3));
  CHECK_FALSE(attn::block_in_cache(-1, 3));
}

TEST_CASE("emulated kernels match the CPU paged attention, GQA 1/4/8, head_dim 64 and 128, split on and off") {
  uint64_t seed = 11;
  for (int64_t gqa : {1, 4, 8}) {
    check_all_splits(make_paged_batch(mixed, 2, gqa, 64, 16, 0, ++seed, true));
    check_all_splits(make_paged_batch(mixed, 1, gqa, 128, 5, 0, ++seed, false));  // odd block size
  }
  // GQA groups larger than a CTA's head chunk (12 and 64 query heads per kv head), head_dim 256 (chunks of 4).
  check_all_splits(make_paged_batch(mixed, 2, 12, 64, 16, 0, ++seed, true));
  check_all_splits(make_paged_batch({{70, 1}, {9, 3}}, 1, 64, 32, 8, 0, ++seed));
  check_all_splits(make_paged_batch(mixed, 2, 8, 256, 16, 0, ++seed));
  check_all_splits(make_paged_batch(mixed, 1, 2, 96, 3, 0, ++seed));
}

TEST_CASE("emulated kernels with sliding windows skip blocks before the window and start mid-block") {
  uint64_t seed = 500;
  for (int64_t window : {1, 3, 7, 16, 21, 100, 1000}) {
    check_all_splits(make_paged_batch(mixed, 2, 4, 64, 4, window, ++seed, true));
    check_all_splits(make_paged_batch(mixed, 1, 8, 128, 16, window, ++seed));
  }
  // A decode row whose window (300) starts mid-block (block 16) deep into a 900-token context, beside a prefill.
  check_all_splits(make_paged_batch({{900, 1}, {700, 40}}, 2, 4, 64, 16, 300, ++seed, true));
}

TEST_CASE("emulated kernels stay stable for large scores and long contexts") {
  check_all_splits(make_paged_batch(mixed, 2, 2, 64, 8, 0, 901, false, 40.0f));
  check_all_splits(make_paged_batch(mixed, 2, 2, 64, 8, 9, 902, false, 40.0f));
  check_all_splits(make_paged_batch({{2000, 1}, {1500, 2}, {130, 130}}, 2, 4, 64, 16, 0, 903, true));
}
