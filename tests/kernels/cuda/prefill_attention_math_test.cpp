// The tensor-core prefill attention's math on the CPU: the kernel's loop structure (a CTA per 64-row tile of a
// prefill sequence and query head, 64-key tiles over the tile's key span, S = Q K^T, masking, online softmax, the
// weights P rounded to 16 bits, O rescaled and accumulated through P V) emulated with the very
// prefill_attention_math.hpp and attention_math.hpp functions the kernel calls, with q, k, v and P rounded to bf16 as
// the MMAs take them. Compared with kernels/cpu's paged attention over the same bf16 cache values, on random paged
// caches with shuffled block tables, GQA, windows, chunks of several tiles and decode rows beside them. Plus the
// geometry: which sequences the kernel takes, its grid, its shared memory.
#include "kernels/cuda/prefill_attention_math.hpp"
#include "kernels/cuda/attention_math.hpp"
#include "kernels/cuda/prefill_attention.hpp"
#include "kernels/dtype.hpp"

#include "paged_batch_fixture.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

namespace attn = actorllm::cuda::attn;
namespace prefill = actorllm::cuda::prefill;
using actorllm::cuda_test::make_paged_batch;
using actorllm::cuda_test::never_read_block;
using actorllm::cuda_test::paged_batch;
using actorllm::cuda_test::seq_spec;

float to_bf16(float x) { return actorllm::bf16_to_f32(actorllm::f32_to_bf16(x)); }

paged_batch bf16_batch(const std::vector<seq_spec>& specs, int64_t n_head_kv, int64_t gqa, int64_t head_dim,
                       int64_t window, uint64_t seed) {
  paged_batch b = make_paged_batch(specs, n_head_kv, gqa, head_dim, 16, window, seed);
  actorllm::cuda_test::round_cache_to_bf16(b);
  return b;
}

// What prefill_attention_kernel computes, CTA by CTA and tile by tile (the MMAs' sums run in another order on the
// GPU; that only changes rounding). Rows the kernel does not take keep paged_batch::untouched. Checks that no
// block-table entry outside a tile's key span is read.
std::vector<float> emulate_prefill(const paged_batch& b, int64_t max_tiles) {
  const int32_t hd = static_cast<int32_t>(b.head_dim);
  std::vector<float> out(b.q.size(), paged_batch::untouched);
  const int64_t cache_blocks = b.n_blocks;
  for (int64_t x = 0; x < b.n_seqs() * max_tiles; ++x) {
    const prefill::row_tile tile =
        prefill::row_tile_of(static_cast<int32_t>(x), static_cast<int32_t>(max_tiles), b.seqs.data());
    if (tile.n_rows == 0)
      continue;
    const int32_t* seq = b.seqs.data() + 4 * tile.seq;
    for (int32_t head = 0; head < b.n_head; ++head) {
      const int32_t kv_head = attn::kv_head_of(head, static_cast<int32_t>(b.n_head), static_cast<int32_t>(b.n_head_kv));
      std::vector<attn::row_range> ranges(prefill::tile_rows, attn::row_range{0, -1, false});
      std::vector<attn::softmax_state> state(prefill::tile_rows, attn::softmax_start());
      std::vector<bool> spoiled(prefill::tile_rows, false);
      std::vector<float> qs(static_cast<size_t>(prefill::tile_rows * hd), 0.0f);
      std::vector<float> os(qs.size(), 0.0f);
      prefill::key_span span = prefill::key_span_empty();
      for (int32_t i = 0; i < tile.n_rows; ++i) {
        ranges[i] =
            attn::query_row_range(b.positions[static_cast<size_t>(tile.first_row + i)], b.window, seq[3], b.block_size);
        prefill::key_span_add(span, ranges[i]);
        for (int32_t d = 0; d < hd; ++d)
          qs[static_cast<size_t>(i * hd + d)] =
              to_bf16(b.q[static_cast<size_t>(((tile.first_row + i) * b.n_head + head) * hd + d)]);
      }
      for (int32_t key0 = span.last < span.first ? span.last + 1 : prefill::first_key_tile(span); key0 <= span.last;
           key0 += prefill::tile_keys) {
        std::vector<float> ks(static_cast<size_t>(prefill::tile_keys * hd), 0.0f), vs(ks.size(), 0.0f);
        std::vector<bool> bad(prefill::tile_keys, false);
        for (int32_t j = 0; j < prefill::tile_keys; ++j) {
          const int32_t key = key0 + j;
          if (!prefill::key_loaded(key, span))
            continue;
          const attn::block_slot bs = attn::block_slot_of(key, static_cast<int32_t>(b.block_size));
          const int64_t block = b.block_tables[static_cast<size_t>(seq[2] + bs.table_index)];
          REQUIRE_MESSAGE(block != never_read_block, "a table entry outside every row's range was read");
          if (!attn::block_in_cache(block, cache_blocks)) {
            bad[static_cast<size_t>(j)] = true;
            continue;
          }
          const int64_t at = attn::cache_offset(block, bs.offset, b.block_size, b.n_head_kv, kv_head, hd);
          for (int32_t d = 0; d < hd; ++d) {
            ks[static_cast<size_t>(j * hd + d)] = b.k_cache[static_cast<size_t>(at + d)];
            vs[static_cast<size_t>(j * hd + d)] = b.v_cache[static_cast<size_t>(at + d)];
          }
        }
        for (int32_t i = 0; i < prefill::tile_rows; ++i) {
          float score[prefill::tile_keys];
          float tile_max = -INFINITY;
          for (int32_t j = 0; j < prefill::tile_keys; ++j) {
            float s = 0.0f;
            for (int32_t d = 0; d < hd; ++d)
              s += qs[static_cast<size_t>(i * hd + d)] * ks[static_cast<size_t>(j * hd + d)];
            score[j] = prefill::masked_score(s * b.scale, key0 + j, ranges[i]);
            if (bad[static_cast<size_t>(j)] && prefill::spoils_row(key0 + j, ranges[i]))
              spoiled[i] = true;
            tile_max = std::fmax(tile_max, score[j]);
          }
          const float correction = attn::softmax_rescale(state[i], tile_max);
          float sum = 0.0f;
          float weight[prefill::tile_keys];
          for (int32_t j = 0; j < prefill::tile_keys; ++j) {
            weight[j] = to_bf16(score[j] == -INFINITY ? 0.0f : attn::softmax_weight(state[i], score[j]));
            sum += weight[j];
          }
          state[i].sum += sum;
          for (int32_t d = 0; d < hd; ++d) {
            float o = os[static_cast<size_t>(i * hd + d)] * correction;
            for (int32_t j = 0; j < prefill::tile_keys; ++j)
              o += weight[j] * vs[static_cast<size_t>(j * hd + d)];
            os[static_cast<size_t>(i * hd + d)] = o;
          }
        }
      }
      for (int32_t i = 0; i < tile.n_rows; ++i) {
        const bool nan_row = !ranges[i].valid || spoiled[i] || !(state[i].sum > 0.0f);
        for (int32_t d = 0; d < hd; ++d)
          out[static_cast<size_t>(((tile.first_row + i) * b.n_head + head) * hd + d)] =
              nan_row ? NAN : os[static_cast<size_t>(i * hd + d)] / state[i].sum;
      }
    }
  }
  return out;
}

// The emulation against the CPU over the rows of the prefill sequences; the other rows must stay untouched.
void check_batch(const paged_batch& b) {
  const int64_t max_tiles = actorllm::cuda::prefill_attention_max_tiles(b.seqs.data(), b.n_seqs());
  REQUIRE(max_tiles > 0);
  const std::vector<float> out = emulate_prefill(b, max_tiles);
  const int64_t row = b.n_head * b.head_dim;
  int64_t checked = 0, bad = 0;
  double worst = 0.0;
  for (int64_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t* e = b.seqs.data() + 4 * s;
    for (int64_t r = e[0]; r < e[0] + e[1]; ++r)
      for (int64_t i = 0; i < row; ++i) {
        const auto at = static_cast<size_t>(r * row + i);
        if (!prefill::takes_sequence(e[1])) {
          bad += out[at] != paged_batch::untouched;
          continue;
        }
        ++checked;
        // q and the weights are rounded to bf16 (relative 2^-9 each): the outputs, averages of values in [-1, 1],
        // stay within a few thousandths.
        const double err = std::fabs(static_cast<double>(out[at]) - b.expected[at]);
        worst = std::fmax(worst, err);
        bad += !(err <= 4e-3);
      }
  }
  INFO(b.describe(), ": worst error ", worst);
  CHECK(checked > 0);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("prefill attention: sequences of 16 query rows or more take the kernel, in tiles of 64 rows") {
  CHECK_FALSE(prefill::takes_sequence(1));
  CHECK_FALSE(prefill::takes_sequence(15));
  CHECK(prefill::takes_sequence(16));
  CHECK(prefill::tiles_of(16) == 1);
  CHECK(prefill::tiles_of(64) == 1);
  CHECK(prefill::tiles_of(65) == 2);
  // seqs: (query_begin, n_query, first table entry, n_blocks): a decode row, a 100-row chunk, a 15-row chunk.
  const std::vector<int32_t> seqs{0, 1, 0, 2, 1, 100, 2, 8, 101, 15, 10, 4};
  CHECK(actorllm::cuda::prefill_attention_max_tiles(seqs.data(), 3) == 2);
  CHECK(actorllm::cuda::prefill_attention_max_tiles(seqs.data(), 1) == 0);
  // grid x = sequence * max_tiles + tile
  CHECK(prefill::row_tile_of(0, 2, seqs.data()).n_rows == 0);  // the decode row's sequence
  const prefill::row_tile t2 = prefill::row_tile_of(2, 2, seqs.data());
  CHECK(t2.seq == 1);
  CHECK(t2.first_row == 1);
  CHECK(t2.n_rows == 64);
  const prefill::row_tile t3 = prefill::row_tile_of(3, 2, seqs.data());
  CHECK(t3.first_row == 65);
  CHECK(t3.n_rows == 36);
  CHECK(prefill::row_tile_of(4, 2, seqs.data()).n_rows == 0);  // the 15-row chunk stays with the per-row kernel
}

TEST_CASE("prefill attention: the key span is the union of the valid rows' ranges, tiles aligned to 64") {
  prefill::key_span s = prefill::key_span_empty();
  CHECK(s.last < s.first);
  prefill::key_span_add(s, attn::row_range{100, 130, true});
  prefill::key_span_add(s, attn::row_range{0, 500, false});  // an invalid row adds nothing
  prefill::key_span_add(s, attn::row_range{101, 131, true});
  CHECK(s.first == 100);
  CHECK(s.last == 131);
  CHECK(prefill::first_key_tile(s) == 64);
  CHECK_FALSE(prefill::key_loaded(99, s));
  CHECK(prefill::key_loaded(100, s));
  CHECK_FALSE(prefill::key_loaded(132, s));
  const attn::row_range r{100, 130, true};
  CHECK(prefill::masked_score(1.5f, 130, r) == 1.5f);
  CHECK(prefill::masked_score(1.5f, 131, r) == -INFINITY);  // causal
  CHECK(prefill::masked_score(1.5f, 99, r) == -INFINITY);   // the window
  CHECK(prefill::spoils_row(120, r));
  CHECK_FALSE(prefill::spoils_row(131, r));
}

TEST_CASE("prefill attention: which calls it serves, and its shared memory fits an H100's block with MMA alignment") {
  using actorllm::cuda::kv_element;
  using actorllm::cuda::prefill_attention_applies;
  const actorllm::kv_shard_layout plain{};
  CHECK(prefill_attention_applies(kv_element::bf16, 128, plain, false));
  CHECK(prefill_attention_applies(kv_element::f16, 64, plain, false));
  CHECK(prefill_attention_applies(kv_element::fp8_e4m3, 128, plain, false));
  CHECK_FALSE(prefill_attention_applies(kv_element::f32, 128, plain, false));  // f32 keeps the per-row kernel
  CHECK_FALSE(prefill_attention_applies(kv_element::bf16, 96, plain, false));
  CHECK_FALSE(prefill_attention_applies(kv_element::bf16, 128, plain, true));  // a log-sum-exp output: DCP/PCP
  for (int64_t hd : {64, 128}) {
    const actorllm::cuda::prefill_smem_layout l = actorllm::cuda::prefill_smem_layout_of(hd);
    CHECK(l.bytes <= 227 * 1024);
    for (int64_t at : {l.q, l.k, l.v, l.scores, l.weights, l.out, l.key_source})
      CHECK(at % 128 == 0);
    CHECK(l.ld16 % 8 == 0);  // wmma: 16-bit leading dimensions a multiple of 8, f32 ones of 4
    CHECK(l.ld_weights % 8 == 0);
    CHECK(l.ld_scores % 4 == 0);
    CHECK(l.ld_out % 4 == 0);
    CHECK((16 * l.ld16 * 2) % 32 == 0);  // each warp's 16-row slice starts 32-byte aligned
    CHECK((16 * l.ld_out * 4) % 32 == 0);
    CHECK((16 * l.ld_scores * 4) % 32 == 0);
    CHECK((16 * l.ld_weights * 2) % 32 == 0);
  }
}

TEST_CASE(
    "prefill attention emulated: chunks of one and several tiles beside decode rows, GQA 1/4, head_dim 64 and 128") {
  for (int64_t hd : {64, 128})
    for (int64_t gqa : {1, 4}) {
      // a 100-row chunk at context 300 (two tiles, 5 key tiles), a first chunk of 16 rows, a 15-row chunk and two
      // decode rows the per-row kernel keeps
      check_batch(bf16_batch({{300, 100}, {5, 1}, {16, 16}, {40, 15}, {77, 1}}, 2, gqa, hd, 0, 11 + hd + gqa));
    }
}

TEST_CASE("prefill attention emulated: sliding windows skip the blocks before the span and start mid-tile") {
  check_batch(bf16_batch({{400, 130}, {33, 20}}, 2, 2, 64, 50, 5));
  check_batch(bf16_batch({{200, 64}}, 1, 8, 128, 17, 6));
}

TEST_CASE("prefill attention emulated: a bad block id spoils exactly the rows whose range holds it") {
  paged_batch b = bf16_batch({{200, 80}}, 2, 2, 64, 0, 9);
  const int32_t* e = b.seqs.data();
  // The block of positions 144..159: rows at positions 120..143 never see it, rows from 144 on do.
  b.block_tables[static_cast<size_t>(e[2] + 9)] = static_cast<int32_t>(b.n_blocks + 5);
  const std::vector<float> out = emulate_prefill(b, actorllm::cuda::prefill_attention_max_tiles(b.seqs.data(), 1));
  const int64_t row = b.n_head * b.head_dim;
  for (int64_t r = 0; r < e[1]; ++r) {
    const int32_t pos = b.positions[static_cast<size_t>(r)];
    const float v = out[static_cast<size_t>(r * row)];
    CAPTURE(pos);
    CHECK(std::isnan(v) == (pos >= 144));
  }
}
