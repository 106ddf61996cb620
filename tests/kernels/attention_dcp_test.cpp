// Decode context parallel attention on the CPU kernels: the positions of every sequence dealt out to D ranks' caches
// (kv_shard_layout, interleaved runs), each rank attending every query head over its share with the log-sum-exp
// kept, and merge_attention_partials combining the shares, against a dense causal float64 reference. Unwritten
// slots hold NaN, so a rank that read a position it does not keep would show.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "attention_reference.hpp"
#include "kernel_test_util.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/kv_shard_layout.hpp"

using namespace actorllm;

namespace {

struct seq_spec {
  int32_t context;  // tokens in the cache after this step
  int32_t n_query;  // query rows this step: the last n_query positions
};

// D ranks of one DCP group, each with a cache of `blocks` blocks of `block_size` slots; the scheduler's blocks cover
// block_size * D positions. window > 0: a sliding window.
void run_dcp_case(int32_t n_ranks, int32_t interleave, int64_t n_head, int64_t head_dim, int64_t block_size,
                  const std::vector<seq_spec>& specs, uint64_t seed, int64_t window = 0) {
  test::data_rng rng(seed);
  const int64_t per_block = block_size * n_ranks;  // positions per block of the tables
  int64_t blocks_needed = 0;
  for (const auto& s : specs)
    blocks_needed += (s.context + per_block - 1) / per_block;
  const int64_t n_blocks = blocks_needed + 2;
  std::vector<int32_t> pool_ids(static_cast<size_t>(n_blocks));
  std::iota(pool_ids.begin(), pool_ids.end(), 0);
  for (size_t i = pool_ids.size(); i > 1; --i)
    std::swap(pool_ids[i - 1], pool_ids[static_cast<size_t>(rng.below(static_cast<int64_t>(i)))]);

  // One kv head (the DCP case: its copies are what the ranks share), every query head reads it.
  std::vector<std::vector<float>> k_cache(static_cast<size_t>(n_ranks)), v_cache(static_cast<size_t>(n_ranks));
  for (int32_t d = 0; d < n_ranks; ++d) {
    k_cache[static_cast<size_t>(d)].assign(static_cast<size_t>(n_blocks * block_size * head_dim), std::nanf(""));
    v_cache[static_cast<size_t>(d)].assign(k_cache[static_cast<size_t>(d)].size(), std::nanf(""));
  }
  auto view = [&](int32_t d) {
    return cpu::paged_kv_view{k_cache[static_cast<size_t>(d)].data(),
                              v_cache[static_cast<size_t>(d)].data(),
                              n_blocks,
                              block_size,
                              1,
                              head_dim};
  };
  auto layout = [&](int32_t d) { return kv_shard_layout{n_ranks, d, interleave}; };

  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> dense_k, dense_v;
  size_t next_block = 0;
  for (const auto& s : specs) {
    const int64_t nb = (s.context + per_block - 1) / per_block;
    tables.emplace_back(pool_ids.begin() + static_cast<std::ptrdiff_t>(next_block),
                        pool_ids.begin() + static_cast<std::ptrdiff_t>(next_block + static_cast<size_t>(nb)));
    next_block += static_cast<size_t>(nb);
    dense_k.push_back(test::random_floats(static_cast<size_t>(s.context * head_dim), rng.next()));
    dense_v.push_back(test::random_floats(static_cast<size_t>(s.context * head_dim), rng.next()));
    // Every rank is handed every token, as a step hands them, with slot -1 where another rank keeps it.
    for (int32_t d = 0; d < n_ranks; ++d) {
      std::vector<int64_t> slots;
      for (int32_t p = 0; p < s.context; ++p)
        slots.push_back(!layout(d).owns(p) ? -1
                                           : tables.back()[static_cast<size_t>(p / per_block)] * block_size +
                                                 layout(d).local_count(p) % block_size);
      cpu::write_kv(view(d), dense_k.back().data(), dense_v.back().data(), slots.data(), s.context);
    }
  }

  std::vector<cpu::attention_seq> seqs;
  std::vector<int32_t> positions;
  std::vector<size_t> row_seq;
  for (size_t s = 0; s < specs.size(); ++s) {
    seqs.push_back({static_cast<int32_t>(positions.size()), specs[s].n_query, tables[s].data(),
                    static_cast<int32_t>(tables[s].size())});
    for (int32_t r = 0; r < specs[s].n_query; ++r) {
      positions.push_back(specs[s].context - specs[s].n_query + r);
      row_seq.push_back(s);
    }
  }
  const auto n_tokens = static_cast<int64_t>(positions.size());
  const auto q = test::random_floats(static_cast<size_t>(n_tokens * n_head * head_dim), rng.next(), -3.0f, 3.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  thread_pool pool(2);
  std::vector<float> parts(static_cast<size_t>(n_ranks) * q.size(), -5.0f);
  std::vector<float> lses(static_cast<size_t>(n_ranks * n_tokens * n_head), -5.0f);
  for (int32_t d = 0; d < n_ranks; ++d)
    cpu::paged_attention(q.data(), positions.data(), seqs.data(), static_cast<int64_t>(seqs.size()), view(d), n_head,
                         scale, parts.data() + static_cast<size_t>(d) * q.size(), pool, window, layout(d),
                         lses.data() + d * n_tokens * n_head);
  // Each rank merges a different slice of the heads; together they cover all of them.
  std::vector<float> out(q.size(), -7.0f);
  const int64_t heads_per_rank = n_head / n_ranks;
  for (int32_t d = 0; d < n_ranks; ++d) {
    std::vector<float> mine(static_cast<size_t>(n_tokens * heads_per_rank * head_dim));
    cpu::merge_attention_partials(parts.data(), lses.data(), n_ranks, n_tokens, n_head, d * heads_per_rank,
                                  heads_per_rank, head_dim, mine.data());
    for (int64_t t = 0; t < n_tokens; ++t)
      std::copy_n(mine.begin() + t * heads_per_rank * head_dim, heads_per_rank * head_dim,
                  out.begin() + (t * n_head + d * heads_per_rank) * head_dim);
  }

  std::vector<double> ref(out.size());
  for (int64_t r = 0; r < n_tokens; ++r)
    for (int64_t h = 0; h < n_head; ++h)
      test::reference_attention(q.data() + (r * n_head + h) * head_dim, dense_k[row_seq[static_cast<size_t>(r)]],
                                dense_v[row_seq[static_cast<size_t>(r)]], 1, 0, head_dim,
                                positions[static_cast<size_t>(r)], window, scale,
                                ref.data() + (r * n_head + h) * head_dim);
  const std::string what = "dcp " + std::to_string(n_ranks) + " interleave " + std::to_string(interleave) +
                           " block_size " + std::to_string(block_size) + " window " + std::to_string(window);
  test::check_close(out, ref, 2e-6, 1e-4, what);
  // Every rank's partial results are finite or exactly (0, -inf) where it kept none of a row's keys.
  for (size_t i = 0; i < lses.size(); ++i)
    CHECK_MESSAGE((std::isfinite(lses[i]) || lses[i] == -INFINITY), what << " lse " << i << " = " << lses[i]);
  for (float x : parts)
    REQUIRE_MESSAGE(std::isfinite(x), what << ": a partial output read an unwritten slot");
}

const std::vector<seq_spec> mixed = {{37, 1}, {23, 6}, {19, 19}, {1, 1}, {50, 1}, {33, 4}, {130, 2}};

}  // namespace

TEST_CASE(
    "kv_shard_layout: positions dealt out in interleaved runs, local indices dense and in position order "
    "[asan]") {
  for (int32_t n : {1, 2, 3, 4})
    for (int32_t interleave : {1, 2, 4})
      for (int32_t shard = 0; shard < n; ++shard) {
        const kv_shard_layout l{n, shard, interleave};
        // Each owned position's local index is the count of owned positions before it; a rank keeps its share of
        // every whole cycle; a block of bs local slots holds the rank's share of one virtual block of bs * n
        // positions (the owned position p's local index lies in block p / (bs * n)).
        const int64_t bs = interleave * 4;
        int64_t kept = 0;
        for (int64_t p = 0; p < 200; ++p) {
          CHECK(l.local_count(p) == kept);
          if (l.owns(p)) {
            CHECK(l.local_count(p) / bs == p / (bs * n));
            ++kept;
          }
        }
        CHECK(kept == l.local_count(200));
        CHECK(l.local_count(interleave * n * 5) == interleave * 5);
      }
  const kv_shard_layout plain;
  CHECK(plain.plain());
  CHECK(plain.local_count(37) == 37);
  CHECK(plain.owns(37));
}

TEST_CASE("dcp attention: each rank's share merged by log-sum-exp equals full causal attention [asan]") {
  for (int32_t n_ranks : {2, 4})
    for (int32_t interleave : {1, 4}) {
      run_dcp_case(n_ranks, interleave, 8, 16, 8, mixed, 17 + static_cast<uint64_t>(n_ranks * 10 + interleave));
      run_dcp_case(n_ranks, interleave, 4, 40, 16, mixed, 29 + static_cast<uint64_t>(n_ranks * 10 + interleave));
    }
}

TEST_CASE("dcp attention with a sliding window and one rank of three [asan]") {
  run_dcp_case(2, 1, 4, 16, 8, mixed, 5, 11);
  run_dcp_case(4, 2, 8, 16, 8, mixed, 6, 24);
  run_dcp_case(3, 1, 3, 8, 4, mixed, 7);
}

TEST_CASE("dcp attention: a decode row at 4,000 tokens of context, 4 ranks") {
  run_dcp_case(4, 1, 8, 32, 16, {{4000, 1}, {3001, 3}}, 9);
}

TEST_CASE("merge_attention_partials: a single part is itself, a part with lse -inf adds nothing [asan]") {
  const int64_t n_tokens = 3, n_head = 2, hd = 5;
  const auto a = test::random_floats(static_cast<size_t>(n_tokens * n_head * hd), 1);
  std::vector<float> lse(static_cast<size_t>(n_tokens * n_head), 0.25f);
  std::vector<float> out(a.size());
  cpu::merge_attention_partials(a.data(), lse.data(), 1, n_tokens, n_head, 0, n_head, hd, out.data());
  for (size_t i = 0; i < a.size(); ++i)
    CHECK(out[i] == doctest::Approx(a[i]).epsilon(1e-6));
  std::vector<float> two(a);
  two.insert(two.end(), a.size(), 0.0f);
  std::vector<float> lse2(lse);
  lse2.insert(lse2.end(), lse.size(), -INFINITY);
  cpu::merge_attention_partials(two.data(), lse2.data(), 2, n_tokens, n_head, 0, n_head, hd, out.data());
  for (size_t i = 0; i < a.size(); ++i)
    CHECK(out[i] == a[i]);
}
