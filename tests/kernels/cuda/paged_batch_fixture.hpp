// A random paged-attention batch and its CPU reference output, shared by the host emulation of the CUDA kernels
// (attention_math_test.cpp) and the GPU parity test (paged_attention_gpu_test.cpp). Built like
// tests/kernels/attention_test.cpp: blocks from one shuffled pool (non-contiguous, interleaved tables), unwritten
// slots NaN, k/v written through write_kv with padding slots in between, and block-table entries the kernels must
// never read set to an id outside the cache.
#pragma once

#include "kernels/cpu/attention.hpp"
#include "kernels/cuda/attention_plan.hpp"
#include "kernels/dtype.hpp"
#include "kernels/kernel_test_util.hpp"
#include "util/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace actorllm::cuda_test {

/// One sequence of the batch: `context` tokens in the cache after this step, the last `n_query` of them queried.
struct seq_spec {
  int32_t context;
  int32_t n_query;
};

/// The kernel tests' splitmix64 (tests/kernels/kernel_test_util.hpp): test data independent of the code under
/// test.
using batch_rng = actorllm::test::data_rng;

/// A block id no cache holds: table entries before every row's window and never-read spares get it, so a kernel
/// that loads one reads no memory (it is outside the cache) but produces NaN, which the comparison catches.
inline constexpr int32_t never_read_block = std::numeric_limits<int32_t>::max();

struct paged_batch {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0, block_size = 0, n_blocks = 0, window = 0;
  int64_t n_tokens = 0;
  std::vector<int32_t> positions;     // [n_tokens]; padding rows (in no sequence) hold 0
  std::vector<int32_t> seqs;          // [n_seqs * 4]
  std::vector<int32_t> block_tables;  // every sequence's table, back to back
  std::vector<bool> padding_row;      // [n_tokens]
  // The k/v rows written into the cache, with padding slots (-1) in between.
  std::vector<float> k_rows, v_rows;
  std::vector<int64_t> slots;
  std::vector<float> k_cache, v_cache;  // after cpu::write_kv; NaN where never written
  std::vector<float> q;                 // [n_tokens, n_head, head_dim]
  float scale = 0.0f;
  std::vector<float> expected;  // cpu::paged_attention's output; padding rows hold `untouched`

  static constexpr float untouched = -7777.0f;

  int64_t n_seqs() const { return static_cast<int64_t>(seqs.size() / 4); }
  int64_t kv_row() const { return n_head_kv * head_dim; }
  cpu::paged_kv_view cpu_cache() { return {k_cache.data(), v_cache.data(), n_blocks, block_size, n_head_kv, head_dim}; }
  cuda::attention_geometry geometry() const { return {n_tokens, n_head, n_head_kv, head_dim, block_size, window}; }
  std::string describe() const {
    return "n_head " + std::to_string(n_head) + " n_head_kv " + std::to_string(n_head_kv) + " head_dim " +
           std::to_string(head_dim) + " block_size " + std::to_string(block_size) + " window " +
           std::to_string(window) + " rows " + std::to_string(n_tokens);
  }
};

/// The batch of `specs` (sequences in order; with `padding`, one row of no sequence after each sequence's rows),
/// q uniform in [-q_scale, q_scale], k and v in [-1, 1]. Every other sequence owns one spare block past its
/// context that must not be read.
inline paged_batch make_paged_batch(const std::vector<seq_spec>& specs, int64_t n_head_kv, int64_t gqa,
                                    int64_t head_dim, int64_t block_size, int64_t window, uint64_t seed,
                                    bool padding = false, float q_scale = 1.0f) {
  paged_batch b;
  b.n_head = n_head_kv * gqa;
  b.n_head_kv = n_head_kv;
  b.head_dim = head_dim;
  b.block_size = block_size;
  b.window = window;
  batch_rng rng(seed);
  const int64_t row = b.kv_row();

  int64_t blocks_needed = 0;
  for (const auto& s : specs)
    blocks_needed += (s.context + block_size - 1) / block_size;
  b.n_blocks = blocks_needed + 2;  // spare blocks nobody writes
  std::vector<int32_t> pool(static_cast<size_t>(b.n_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  for (size_t i = pool.size(); i > 1; --i)
    std::swap(pool[i - 1], pool[static_cast<size_t>(rng.below(static_cast<int64_t>(i)))]);
  const int32_t spare = pool.back();

  b.k_cache.assign(static_cast<size_t>(b.n_blocks * block_size * row), std::nanf(""));
  b.v_cache = b.k_cache;
  size_t next_block = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    const seq_spec& spec = specs[s];
    const int64_t nb = (spec.context + block_size - 1) / block_size;
    const auto table_begin = static_cast<int32_t>(b.block_tables.size());
    for (int64_t i = 0; i < nb; ++i)
      b.block_tables.push_back(pool[next_block++]);
    for (int32_t p = 0; p < spec.context; ++p) {
      const int64_t blk = b.block_tables[static_cast<size_t>(table_begin + p / block_size)];
      b.slots.push_back(blk * block_size + p % block_size);
      for (int64_t i = 0; i < row; ++i) {
        b.k_rows.push_back(rng.uniform(-1.0f, 1.0f));
        b.v_rows.push_back(rng.uniform(-1.0f, 1.0f));
      }
      if (p % 5 == 2) {  // a padding slot: must be skipped
        b.slots.push_back(-1);
        b.k_rows.insert(b.k_rows.end(), static_cast<size_t>(row), 1e30f);
        b.v_rows.insert(b.v_rows.end(), static_cast<size_t>(row), 1e30f);
      }
    }
    if (window > 0) {  // entries of blocks wholly before every row's window
      const int64_t first_seen = std::max<int64_t>(0, spec.context - spec.n_query - window + 1);
      for (int64_t i = 0; i < first_seen / block_size; ++i)
        b.block_tables[static_cast<size_t>(table_begin + i)] = never_read_block;
    }
    int32_t n_table = static_cast<int32_t>(nb);
    if (s % 2 == 1) {  // a block past the context: allocated to the sequence, never read
      b.block_tables.push_back(s % 4 == 1 ? spare : never_read_block);
      ++n_table;
    }
    b.seqs.insert(b.seqs.end(), {static_cast<int32_t>(b.positions.size()), spec.n_query, table_begin, n_table});
    for (int32_t r = 0; r < spec.n_query; ++r) {
      b.positions.push_back(spec.context - spec.n_query + r);
      b.padding_row.push_back(false);
    }
    if (padding) {
      b.positions.push_back(0);
      b.padding_row.push_back(true);
    }
  }
  b.n_tokens = static_cast<int64_t>(b.positions.size());
  cpu::write_kv(b.cpu_cache(), b.k_rows.data(), b.v_rows.data(), b.slots.data(), static_cast<int64_t>(b.slots.size()));

  b.q.resize(static_cast<size_t>(b.n_tokens * b.n_head * head_dim));
  for (auto& x : b.q)
    x = rng.uniform(-q_scale, q_scale);
  b.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

  std::vector<cpu::attention_seq> cpu_seqs;
  for (int64_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t* e = b.seqs.data() + 4 * s;
    cpu_seqs.push_back({e[0], e[1], b.block_tables.data() + e[2], e[3]});
  }
  b.expected.assign(b.q.size(), paged_batch::untouched);
  thread_pool pool_threads(2);
  cpu::paged_attention(b.q.data(), b.positions.data(), cpu_seqs.data(), b.n_seqs(), b.cpu_cache(), b.n_head, b.scale,
                       b.expected.data(), pool_threads, window);
  return b;
}

/// The batch with its cache rounded to bf16 (what a bf16 cache holds; NaN stays NaN) and the CPU reference
/// recomputed over those values.
inline void round_cache_to_bf16(paged_batch& b) {
  for (auto* cache : {&b.k_cache, &b.v_cache})
    for (auto& x : *cache)
      x = bf16_to_f32(f32_to_bf16(x));
  std::vector<cpu::attention_seq> cpu_seqs;
  for (int64_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t* e = b.seqs.data() + 4 * s;
    cpu_seqs.push_back({e[0], e[1], b.block_tables.data() + e[2], e[3]});
  }
  b.expected.assign(b.q.size(), paged_batch::untouched);
  thread_pool pool_threads(2);
  cpu::paged_attention(b.q.data(), b.positions.data(), cpu_seqs.data(), b.n_seqs(), b.cpu_cache(), b.n_head, b.scale,
                       b.expected.data(), pool_threads, b.window);
}

/// Compares out with the CPU reference, |got - ref| <= tol + eps * |ref| on sequence rows, and checks that padding
/// rows still hold paged_batch::untouched. Returns the number of mismatches (and reports the worst).
inline int64_t count_mismatches(const paged_batch& b, const std::vector<float>& out, double tol, double eps,
                                std::string* worst) {
  int64_t bad = 0;
  double worst_excess = -1;
  const int64_t row = b.n_head * b.head_dim;
  for (int64_t r = 0; r < b.n_tokens; ++r) {
    for (int64_t i = 0; i < row; ++i) {
      const auto at = static_cast<size_t>(r * row + i);
      const double got = out[at], ref = b.expected[at];
      const double excess = b.padding_row[static_cast<size_t>(r)]
                                ? (got == paged_batch::untouched ? -1.0 : INFINITY)
                                : (std::isnan(got) ? INFINITY : std::fabs(got - ref) - (tol + eps * std::fabs(ref)));
      if (excess > 0) {
        ++bad;
        if (excess > worst_excess) {
          worst_excess = excess;
          *worst = "row " + std::to_string(r) + " element " + std::to_string(i) + ": got " + std::to_string(got) +
                   " expected " + std::to_string(ref);
        }
      }
    }
  }
  return bad;
}

}  // namespace actorllm::cuda_test
