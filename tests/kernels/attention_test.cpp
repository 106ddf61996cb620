// Paged attention against a dense causal float64 reference: shuffled non-contiguous block tables, sequences that
// mix decode rows with prefill chunks starting mid-sequence, GQA ratios 1, 2 and 4, odd head sizes, sliding
// windows; write_kv's slot mapping and padding.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "attention_reference.hpp"
#include "kernel_test_util.hpp"
#include "kernels/cpu/attention.hpp"

using namespace actorllm;

namespace {

struct seq_spec {
  int32_t context;  // tokens in the cache after this step
  int32_t n_query;  // query rows this step: the last n_query positions
};

// `kv_rounded` = x rounded to the cache's element type and read back (exact for f32).
float kv_rounded(float x, dtype type) {
  uint64_t slot = 0;  // wide enough for any type
  store_from_f32(&slot, type, 0, x);
  return load_as_f32(&slot, type, 0);
}

// A 16-bit cache element: the scalar conversion's code, and the value of a code.
uint16_t code16(float x, dtype type) {
  uint64_t slot = 0;
  store_from_f32(&slot, type, 0, x);
  return static_cast<uint16_t>(slot);
}
float value16(uint16_t code, dtype type) { return type == dtype::bf16 ? bf16_to_f32(code) : f16_to_f32(code); }

// window > 0: a sliding window (row at position p sees [p - window + 1, p]). The block-table entries of blocks
// that lie wholly before the window of every query row of a sequence then point at a spare block that was never
// written (NaN): the kernel must skip those blocks, not read and mask them. kv_type: the cache's element type;
// write_kv gets the f32 rows and the reference their values rounded to it, so both attend over the same numbers.
// heads_outer: the cache laid out [block][kv head][slot][head_dim] (what the CPU backend allocates). Returns the
// output.
std::vector<float> run_case(int64_t n_head_kv, int64_t gqa, int64_t head_dim, int64_t block_size, float q_scale,
                            const std::vector<seq_spec>& specs, int threads, uint64_t seed, int64_t window = 0,
                            dtype kv_type = dtype::f32, bool heads_outer = false) {
  const int64_t n_head = n_head_kv * gqa;
  const int64_t kv_row = n_head_kv * head_dim;
  test::data_rng rng(seed);

  // Give every sequence its blocks from one shuffled pool, so tables are non-contiguous and interleaved.
  int64_t blocks_needed = 0;
  for (const auto& s : specs)
    blocks_needed += (s.context + block_size - 1) / block_size;
  const int64_t n_blocks = blocks_needed + 3;  // a few spare blocks that nobody owns
  std::vector<int32_t> pool_ids(static_cast<size_t>(n_blocks));
  std::iota(pool_ids.begin(), pool_ids.end(), 0);
  for (size_t i = pool_ids.size(); i > 1; --i)
    std::swap(pool_ids[i - 1], pool_ids[static_cast<size_t>(rng.below(static_cast<int64_t>(i)))]);

  // Unwritten slots hold NaN, which must never be read.
  const auto n_elems = static_cast<size_t>(n_blocks * block_size * kv_row);
  std::vector<std::byte> k_cache(n_elems * dtype_size(kv_type)), v_cache(k_cache.size());
  for (size_t i = 0; i < n_elems; ++i) {
    store_from_f32(k_cache.data(), kv_type, i, std::nanf(""));
    store_from_f32(v_cache.data(), kv_type, i, std::nanf(""));
  }
  cpu::paged_kv_view cache{k_cache.data(), v_cache.data(), n_blocks, block_size,
                           n_head_kv,      head_dim,       kv_type,  heads_outer};

  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> dense_k, dense_v;  // per sequence [context][n_head_kv][head_dim]
  size_t next_block = 0;
  for (const auto& s : specs) {
    int64_t nb = (s.context + block_size - 1) / block_size;
    tables.emplace_back(pool_ids.begin() + static_cast<std::ptrdiff_t>(next_block),
                        pool_ids.begin() + static_cast<std::ptrdiff_t>(next_block + static_cast<size_t>(nb)));
    next_block += static_cast<size_t>(nb);
    dense_k.push_back(test::random_floats(static_cast<size_t>(s.context * kv_row), rng.next()));
    dense_v.push_back(test::random_floats(static_cast<size_t>(s.context * kv_row), rng.next()));
    // Fill the cache through write_kv, with padding
    // entries (slot -1) in between that must be skipped.
    std::vector<int64_t> slots;
    std::vector<float> ks, vs;
    for (int32_t p = 0; p < s.context; ++p) {
      int64_t blk = tables.back()[static_cast<size_t>(p / block_size)];
      slots.push_back(blk * block_size + p % block_size);
      auto kb = dense_k.back().begin() + p * kv_row, vb = dense_v.back().begin() + p * kv_row;
      ks.insert(ks.end(), kb, kb + kv_row);
      vs.insert(vs.end(), vb, vb + kv_row);
      for (auto it = kb; it != kb + kv_row; ++it)  // the reference sees what the cache holds
        *it = kv_rounded(*it, kv_type);
      for (auto it = vb; it != vb + kv_row; ++it)
        *it = kv_rounded(*it, kv_type);
      if (p % 3 == 1) {
        slots.push_back(-1);
        ks.insert(ks.end(), static_cast<size_t>(kv_row), 1e30f);
        vs.insert(vs.end(), static_cast<size_t>(kv_row), 1e30f);
      }
    }
    cpu::write_kv(cache, ks.data(), vs.data(), slots.data(), static_cast<int64_t>(slots.size()));
  }
  if (window > 0) {
    const int32_t unwritten = pool_ids.back();  // a spare block: nobody owns it, write_kv never touched it
    for (size_t s = 0; s < specs.size(); ++s) {
      int64_t first_seen = std::max<int64_t>(0, specs[s].context - specs[s].n_query - window + 1);
      for (int64_t b = 0; b < first_seen / block_size; ++b)
        tables[s][static_cast<size_t>(b)] = unwritten;
    }
  }

  // The flattened batch: sequences in order, each with its query rows.
  std::vector<cpu::attention_seq> seqs;
  std::vector<int32_t> positions;
  std::vector<int64_t> row_seq;
  for (size_t s = 0; s < specs.size(); ++s) {
    seqs.push_back({static_cast<int32_t>(positions.size()), specs[s].n_query, tables[s].data(),
                    static_cast<int32_t>(tables[s].size())});
    for (int32_t r = 0; r < specs[s].n_query; ++r) {
      positions.push_back(specs[s].context - specs[s].n_query + r);
      row_seq.push_back(static_cast<int64_t>(s));
    }
  }
  const int64_t n_tokens = static_cast<int64_t>(positions.size());
  auto q = test::random_floats(static_cast<size_t>(n_tokens * n_head * head_dim), rng.next(), -q_scale, q_scale);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> out(q.size(), -5.0f);
  thread_pool pool(threads);
  cpu::paged_attention(q.data(), positions.data(), seqs.data(), static_cast<int64_t>(seqs.size()), cache, n_head, scale,
                       out.data(), pool, window);

  std::vector<double> ref(out.size());
  for (int64_t r = 0; r < n_tokens; ++r) {
    const auto s = static_cast<size_t>(row_seq[static_cast<size_t>(r)]);
    for (int64_t h = 0; h < n_head; ++h)
      test::reference_attention(q.data() + (r * n_head + h) * head_dim, dense_k[s], dense_v[s], n_head_kv, h / gqa,
                                head_dim, positions[static_cast<size_t>(r)], window, scale,
                                ref.data() + (r * n_head + h) * head_dim);
  }
  std::string what = "n_head_kv " + std::to_string(n_head_kv) + " gqa " + std::to_string(gqa) + " head_dim " +
                     std::to_string(head_dim) + " block_size " + std::to_string(block_size) + " q_scale " +
                     std::to_string(q_scale) + " window " + std::to_string(window) + " kv " +
                     std::string{dtype_name(kv_type)} + (heads_outer ? " heads outer" : "");
  test::check_close(out, ref, 2e-6, 1e-4, what);
  return out;
}

// Decode rows (n_query 1), a prefill chunk in the middle of a sequence, a whole prompt from position 0, and a
// one-token sequence.
const std::vector<seq_spec> mixed = {{37, 1}, {23, 6}, {19, 19}, {1, 1}, {50, 1}, {33, 4}};

}  // namespace

TEST_CASE("paged_attention matches dense causal float64 attention, GQA 1/2/4 [asan]") {
  uint64_t seed = 1;
  for (int64_t gqa : {1, 2, 4}) {
    run_case(2, gqa, 16, 4, 1.0f, mixed, 3, ++seed);
    run_case(1, gqa, 17, 5, 1.0f, mixed, 2, ++seed);  // odd head_dim and block size
    run_case(3, gqa, 64, 16, 1.0f, mixed, 1, ++seed);
  }
}

TEST_CASE("paged_attention over head sizes taken in chunks of 4 vectors with AVX2, odd pair counts [asan]") {
  // With 16 vector registers the values go two pairs at a time over chunks of up to 4 vectors of the head, and the
  // scores at most 6 pairs a call: heads of 128 (4 chunks), 40 (4 + 1 vectors with AVX2) and 24, GQA 3 (an odd number
  // of pairs per tile) and 8 (groups of 8 pairs scored 4 + 4), over f32 and bf16 caches.
  uint64_t seed = 40;
  for (dtype kv : {dtype::f32, dtype::bf16})
    for (int64_t gqa : {3, 8})
      for (int64_t hd : {128, 40, 24})
        run_case(1, gqa, hd, 16, 1.0f, mixed, 2, ++seed, 0, kv);
}

TEST_CASE("paged_attention, 8 query heads of 64 a kv head: a decode row's values summed half a head at a time [asan]") {
  // TinyLlama's and Llama 3's heads: with AVX-512 a decode row's 8 pairs add up the values half a head (2 vectors) at
  // a time for all 8. Decode rows over long contexts across many blocks (their next steps' rows asked for a quarter
  // at a time), short ones, a prefill chunk beside them, a window; every cache type, both layouts.
  uint64_t seed = 1200;
  for (dtype kv : {dtype::f32, dtype::bf16, dtype::f16})
    for (bool heads_outer : {true, false}) {
      CAPTURE(dtype_name(kv));
      CAPTURE(heads_outer);
      run_case(2, 8, 64, 16, 1.0f, {{300, 1}, {1, 1}, {45, 1}, {70, 5}}, 2, ++seed, 0, kv, heads_outer);
      run_case(2, 8, 64, 16, 1.0f, {{130, 1}, {33, 1}}, 1, ++seed, 21, kv, heads_outer);
    }
}

TEST_CASE("paged_attention is stable for large scores [asan]") {
  // q values up to 40 push scores into the hundreds: exp without max subtraction would overflow.
  run_case(2, 2, 32, 8, 40.0f, mixed, 2, 77);
}

TEST_CASE("paged_attention with a sliding window skips blocks before it and starts mid-block [asan]") {
  uint64_t seed = 200;
  // Windows of one token, shorter than a block, starting inside a block, spanning several blocks, and wider than
  // every context (which must equal no window).
  for (int64_t window : {1, 3, 7, 16, 21, 1000}) {
    for (int64_t gqa : {1, 4}) {
      run_case(2, gqa, 16, 4, 1.0f, mixed, 2, ++seed, window);
      run_case(1, gqa, 17, 5, 1.0f, mixed, 3, ++seed, window);  // odd head_dim and block size
      run_case(3, gqa, 32, 16, 1.0f, mixed, 1, ++seed, window);
    }
  }
  // A large-score case: the running max must come from the window only.
  run_case(2, 2, 32, 8, 40.0f, mixed, 2, 277, 9);
}

TEST_CASE("paged_attention with a sliding window over a long context") {
  run_case(2, 4, 64, 16, 1.0f, {{700, 3}, {300, 1}, {129, 129}}, 2, 299, 100);
}

TEST_CASE("paged_attention with a long context across many blocks") {
  run_case(2, 4, 64, 16, 1.0f, {{700, 3}, {300, 1}, {129, 129}}, 2, 99);
}

TEST_CASE("paged_attention over a bf16 or f16 cache matches float64 attention over the same rounded values [asan]") {
  uint64_t seed = 500;
  for (dtype kv : {dtype::bf16, dtype::f16}) {
    CAPTURE(dtype_name(kv));
    for (int64_t gqa : {1, 2, 4}) {
      run_case(2, gqa, 16, 4, 1.0f, mixed, 3, ++seed, 0, kv);
      run_case(1, gqa, 17, 5, 1.0f, mixed, 2, ++seed, 0, kv);  // odd head_dim: the scalar tails
      run_case(3, gqa, 64, 16, 1.0f, mixed, 1, ++seed, 0, kv);
      run_case(2, gqa, 8, 16, 1.0f, mixed, 2, ++seed, 0, kv);  // stories260K's head size
    }
    run_case(2, 2, 32, 8, 40.0f, mixed, 2, ++seed, 0, kv);  // large scores
    for (int64_t window : {1, 7, 21})
      run_case(2, 4, 16, 4, 1.0f, mixed, 2, ++seed, window, kv);
    run_case(2, 4, 64, 16, 1.0f, {{300, 3}, {129, 129}}, 2, ++seed, 0, kv);
  }
}

TEST_CASE("paged_attention over a cache laid out kv heads outer gives the bits of the slot-by-slot layout [asan]") {
  // Decode rows (each one row: their next step's rows are prefetched), prefill chunks, windows, 16-bit caches, GQA 1
  // to 8, odd head sizes and block sizes, a long context across many blocks.
  uint64_t seed = 900;
  for (dtype kv : {dtype::f32, dtype::bf16, dtype::f16})
    for (int64_t window : {int64_t{0}, int64_t{7}}) {
      CAPTURE(dtype_name(kv));
      CAPTURE(window);
      for (int64_t gqa : {1, 4}) {
        ++seed;
        CHECK(run_case(2, gqa, 16, 4, 1.0f, mixed, 3, seed, window, kv, true) ==
              run_case(2, gqa, 16, 4, 1.0f, mixed, 3, seed, window, kv, false));
        ++seed;
        CHECK(run_case(3, gqa, 17, 5, 1.0f, mixed, 2, seed, window, kv, true) ==
              run_case(3, gqa, 17, 5, 1.0f, mixed, 2, seed, window, kv, false));
      }
      ++seed;
      CHECK(run_case(4, 8, 64, 16, 1.0f, {{300, 1}, {129, 1}, {70, 5}, {33, 1}}, 2, seed, window, kv, true) ==
            run_case(4, 8, 64, 16, 1.0f, {{300, 1}, {129, 1}, {70, 5}, {33, 1}}, 2, seed, window, kv, false));
    }
}

TEST_CASE("write_kv into a cache laid out kv heads outer puts kv head g of slot s at its block's head-g run [asan]") {
  const int64_t n_blocks = 3, bs = 4, n_head_kv = 3, hd = 5, row = n_head_kv * hd;
  for (dtype kv : {dtype::f32, dtype::bf16}) {
    CAPTURE(dtype_name(kv));
    const size_t esize = dtype_size(kv);
    std::vector<std::byte> kc(static_cast<size_t>(n_blocks * bs * row) * esize), vc(kc.size());
    for (size_t i = 0; i < static_cast<size_t>(n_blocks * bs * row); ++i) {
      store_from_f32(kc.data(), kv, i, -7.0f);
      store_from_f32(vc.data(), kv, i, -7.0f);
    }
    cpu::paged_kv_view cache{kc.data(), vc.data(), n_blocks, bs, n_head_kv, hd, kv, true};
    const std::vector<int64_t> slots = {9, -1, 2, 4};
    std::vector<float> k(static_cast<size_t>(4 * row)), v(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = static_cast<float>(i + 1);
      v[i] = -static_cast<float>(i + 1);
    }
    cpu::write_kv(cache, k.data(), v.data(), slots.data(), 4);
    // Expected: element (block b, head g, offset o, d) = token t's element g * hd + d where slots[t] = b * bs + o.
    for (int64_t b = 0; b < n_blocks; ++b)
      for (int64_t g = 0; g < n_head_kv; ++g)
        for (int64_t o = 0; o < bs; ++o)
          for (int64_t d = 0; d < hd; ++d) {
            const auto at = static_cast<size_t>(((b * n_head_kv + g) * bs + o) * hd + d);
            float want_k = -7.0f, want_v = -7.0f;
            for (size_t t = 0; t < slots.size(); ++t)
              if (slots[t] == b * bs + o) {
                want_k = k[t * static_cast<size_t>(row) + static_cast<size_t>(g * hd + d)];
                want_v = v[t * static_cast<size_t>(row) + static_cast<size_t>(g * hd + d)];
              }
            CAPTURE(at);
            CHECK(load_as_f32(kc.data(), kv, at) == want_k);
            CHECK(load_as_f32(vc.data(), kv, at) == want_v);
            CHECK(static_cast<int64_t>(at) == cache.row_at(b, o, g) + d);
          }
  }
}

TEST_CASE("write_kv rounds to a bf16 or f16 cache to nearest even, as the scalar conversions do [asan]") {
  const int64_t n_blocks = 2, bs = 2, n_head_kv = 2, hd = 19, row = n_head_kv * hd;  // 38: two vectors and a tail
  for (dtype kv : {dtype::bf16, dtype::f16}) {
    CAPTURE(dtype_name(kv));
    std::vector<uint16_t> kc(static_cast<size_t>(n_blocks * bs * row), 0x1234), vc(kc.size(), 0x1234);
    cpu::paged_kv_view cache{kc.data(), vc.data(), n_blocks, bs, n_head_kv, hd, kv};
    // Ties (bf16: 1 + 2^-8 and 1 + 3 * 2^-8 round to even opposite ways; f16: 1 + 2^-11), values that overflow f16,
    // subnormals, signed zeros, infinities, NaN, and random values of every magnitude.
    std::vector<float> k = {1.0f + 0x1p-8f,  1.0f + 3 * 0x1p-8f,
                            1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f,
                            70000.0f,        -65519.0f,
                            65520.0f,        1e-6f,
                            -3e-8f,          0.0f,
                            -0.0f,           INFINITY,
                            -INFINITY,       std::nanf(""),
                            1e-40f};
    auto rest = test::random_floats(static_cast<size_t>(row) - k.size(), 31, -3.0f, 3.0f);
    for (size_t i = 0; i < rest.size(); ++i)
      rest[i] = std::ldexp(rest[i], static_cast<int>(i % 40) - 20);
    k.insert(k.end(), rest.begin(), rest.end());
    std::vector<float> v(k.rbegin(), k.rend());
    const std::vector<int64_t> slots = {3};
    cpu::write_kv(cache, k.data(), v.data(), slots.data(), 1);
    for (int64_t i = 0; i < row; ++i) {
      const uint16_t want_k = code16(k[static_cast<size_t>(i)], kv), want_v = code16(v[static_cast<size_t>(i)], kv);
      const uint16_t got_k = kc[static_cast<size_t>(3 * row + i)], got_v = vc[static_cast<size_t>(3 * row + i)];
      CAPTURE(i);
      if (std::isnan(k[static_cast<size_t>(i)]))
        CHECK(std::isnan(value16(got_k, kv)));
      else
        CHECK(got_k == want_k);
      if (std::isnan(v[static_cast<size_t>(i)]))
        CHECK(std::isnan(value16(got_v, kv)));
      else
        CHECK(got_v == want_v);
    }
    for (int64_t i = 0; i < 3 * row; ++i)  // the slots before it are untouched
      CHECK(kc[static_cast<size_t>(i)] == 0x1234);
  }
}

TEST_CASE("write_kv skips negative slots and writes only its slots [asan]") {
  const int64_t n_blocks = 3, bs = 2, n_head_kv = 2, hd = 3, row = n_head_kv * hd;
  std::vector<float> kc(static_cast<size_t>(n_blocks * bs * row), 0.0f), vc(kc.size(), 0.0f);
  cpu::paged_kv_view cache{kc.data(), vc.data(), n_blocks, bs, n_head_kv, hd};
  std::vector<float> k(static_cast<size_t>(3 * row)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i + 1);
    v[i] = -static_cast<float>(i + 1);
  }
  std::vector<int64_t> slots = {5, -1, 2};
  cpu::write_kv(cache, k.data(), v.data(), slots.data(), 3);
  for (int64_t slot = 0; slot < n_blocks * bs; ++slot) {
    for (int64_t i = 0; i < row; ++i) {
      float want_k = 0.0f;
      if (slot == 5)
        want_k = k[static_cast<size_t>(i)];
      if (slot == 2)
        want_k = k[static_cast<size_t>(2 * row + i)];
      CHECK(kc[static_cast<size_t>(slot * row + i)] == want_k);
      CHECK(vc[static_cast<size_t>(slot * row + i)] == -want_k);
    }
  }
}
