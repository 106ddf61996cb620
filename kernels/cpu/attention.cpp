// Paged attention with an online softmax per work item.
#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/simd.hpp"
#include "util/check.hpp"

namespace actorllm::cpu {
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

float dot(const float* a, const float* b, int64_t n) {
  constexpr int w = simd::width;
  simd::vf s0 = simd::zero(), s1 = s0;
  int64_t i = 0;
  for (; i + 2 * w <= n; i += 2 * w) {
    s0 = simd::fmadd(simd::load(a + i), simd::load(b + i), s0);
    s1 = simd::fmadd(simd::load(a + i + w), simd::load(b + i + w), s1);
  }
  for (; i + w <= n; i += w)
    s0 = simd::fmadd(simd::load(a + i), simd::load(b + i), s0);
  float s = simd::reduce_add(simd::add(s0, s1));
  for (; i < n; ++i)
    s += a[i] * b[i];
  return s;
}

// dst = p * v over n elements.
void scaled_copy(float* dst, float p, const float* v, int64_t n) {
  constexpr int w = simd::width;
  simd::vf vp = simd::set1(p);
  int64_t i = 0;
  for (; i + w <= n; i += w)
    simd::store(dst + i, simd::mul(vp, simd::load(v + i)));
  for (; i < n; ++i)
    dst[i] = p * v[i];
}

// acc += p * v over n elements.
void axpy(float* acc, float p, const float* v, int64_t n) {
  constexpr int w = simd::width;
  simd::vf vp = simd::set1(p);
  int64_t i = 0;
  for (; i + w <= n; i += w)
    simd::store(acc + i, simd::fmadd(vp, simd::load(v + i), simd::load(acc + i)));
  for (; i < n; ++i)
    acc[i] += p * v[i];
}

// x[i] = exp(x[i] - m) for i < n.
void exp_shifted(float* x, int64_t n, float m) {
  constexpr int w = simd::width;
  simd::vf vm = simd::set1(m);
  int64_t i = 0;
  for (; i + w <= n; i += w)
    simd::store(x + i, simd::exp(simd::sub(simd::load(x + i), vm)));
  for (; i < n; ++i)
    x[i] = simd::exp_scalar(x[i] - m);
}

struct work_scratch {
  std::vector<float> acc;     // [n_rep][head_dim] running weighted sum of v
  std::vector<float> scores;  // [n_rep][block_size] of the current block
  std::vector<float> row_max;
  std::vector<float> row_sum;
};

// One work item: query row r (position pos) against kv head g for the n_rep query heads that share it, over the
// cache positions [first, pos] (first > 0 under a sliding window).
void attend(const float* q, const attention_seq& seq, int64_t r, int32_t pos, int64_t g, const paged_kv_view& cache,
            int64_t n_head, int64_t n_rep, float scale, int64_t window, float* out, work_scratch& s) {
  const int64_t hd = cache.head_dim, bs = cache.block_size;
  const int64_t n_ctx = static_cast<int64_t>(pos) + 1;
  const int64_t first = window > 0 ? std::max<int64_t>(0, n_ctx - window) : 0;
  ACTORLLM_CHECK(pos >= 0, "paged_attention: negative position");
  ACTORLLM_CHECK(n_ctx <= static_cast<int64_t>(seq.n_blocks) * bs,
                 "paged_attention: position beyond the sequence's blocks");
  s.acc.assign(static_cast<size_t>(n_rep * hd), 0.0f);
  s.scores.resize(static_cast<size_t>(n_rep * bs));
  s.row_max.assign(static_cast<size_t>(n_rep), neg_inf);
  s.row_sum.assign(static_cast<size_t>(n_rep), 0.0f);
  const float* qg = q + (r * n_head + g * n_rep) * hd;
  const int64_t row_stride = cache.n_head_kv * hd;  // floats between consecutive slots

  // Blocks before the window's first block are never touched; in that block the rows before `first` are skipped.
  for (int64_t b = first / bs; b * bs < n_ctx; ++b) {
    int32_t blk = seq.block_table[b];
    ACTORLLM_CHECK(blk >= 0 && blk < cache.n_blocks, "paged_attention: block id out of range");
    const int64_t lo = std::max<int64_t>(first - b * bs, 0);  // first row of the block inside the window
    int64_t n = std::min(bs, n_ctx - b * bs) - lo;
    const float* kb = cache.k + (static_cast<int64_t>(blk) * bs + lo) * row_stride + g * hd;
    const float* vb = cache.v + (static_cast<int64_t>(blk) * bs + lo) * row_stride + g * hd;
    for (int64_t i = 0; i < n; ++i) {
      const float* krow = kb + i * row_stride;
      for (int64_t j = 0; j < n_rep; ++j)
        s.scores[static_cast<size_t>(j * bs + i)] = dot(qg + j * hd, krow, hd) * scale;
    }
    for (int64_t j = 0; j < n_rep; ++j) {
      float* sc = s.scores.data() + j * bs;
      float block_max = *std::max_element(sc, sc + n);
      float new_max = std::max(s.row_max[static_cast<size_t>(j)], block_max);
      // Rescale what was accumulated under the old max (exp(-inf) = 0 on the first block).
      float correction = simd::exp_scalar(s.row_max[static_cast<size_t>(j)] - new_max);
      s.row_max[static_cast<size_t>(j)] = new_max;
      exp_shifted(sc, n, new_max);
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i)
        sum += sc[i];
      s.row_sum[static_cast<size_t>(j)] = s.row_sum[static_cast<size_t>(j)] * correction + sum;
      float* acc = s.acc.data() + j * hd;
      if (correction != 1.0f)
        for (int64_t d = 0; d < hd; ++d)
          acc[d] *= correction;
    }
    for (int64_t i = 0; i < n; ++i) {
      const float* vrow = vb + i * row_stride;
      for (int64_t j = 0; j < n_rep; ++j)
        axpy(s.acc.data() + j * hd, s.scores[static_cast<size_t>(j * bs + i)], vrow, hd);
    }
  }

  for (int64_t j = 0; j < n_rep; ++j) {
    float* o = out + (r * n_head + g * n_rep + j) * hd;
    float inv = 1.0f / s.row_sum[static_cast<size_t>(j)];
    scaled_copy(o, inv, s.acc.data() + j * hd, hd);
  }
}

}  // namespace

void write_kv(const paged_kv_view& cache, const float* k, const float* v, const int64_t* slot_mapping,
              int64_t n_tokens) {
  const int64_t row = cache.n_head_kv * cache.head_dim;
  const int64_t capacity = cache.n_blocks * cache.block_size;
  for (int64_t t = 0; t < n_tokens; ++t) {
    int64_t slot = slot_mapping[t];
    if (slot < 0)
      continue;
    ACTORLLM_CHECK(slot < capacity, "write_kv: slot beyond the cache");
    std::memcpy(cache.k + slot * row, k + t * row, static_cast<size_t>(row) * sizeof(float));
    std::memcpy(cache.v + slot * row, v + t * row, static_cast<size_t>(row) * sizeof(float));
  }
}

void paged_attention(const float* q, const int32_t* positions, const attention_seq* seqs, int64_t n_seqs,
                     const paged_kv_view& cache, int64_t n_head, float scale, float* out, thread_pool& pool,
                     int64_t window) {
  ACTORLLM_CHECK(cache.n_head_kv > 0 && n_head % cache.n_head_kv == 0,
                 "paged_attention: n_head must be a multiple of n_head_kv");
  const int64_t n_rep = n_head / cache.n_head_kv;
  // Work item w maps to (sequence, query row, kv head) through prefix sums over the sequences.
  std::vector<int64_t> first_item(static_cast<size_t>(n_seqs) + 1, 0);
  for (int64_t s = 0; s < n_seqs; ++s)
    first_item[static_cast<size_t>(s) + 1] = first_item[static_cast<size_t>(s)] + seqs[s].n_query * cache.n_head_kv;
  const int64_t n_items = first_item.back();

  // Items differ in cost (a long prefix versus a short one), so they are handed out dynamically.
  pool.parallel_for_dynamic(n_items, 1, [&](int64_t begin, int64_t end) {
    thread_local work_scratch scratch;
    for (int64_t w = begin; w < end; ++w) {
      auto it = std::upper_bound(first_item.begin(), first_item.end(), w);
      auto s = static_cast<int64_t>(it - first_item.begin()) - 1;
      int64_t local = w - first_item[static_cast<size_t>(s)];
      const attention_seq& seq = seqs[s];
      int64_t r = seq.query_begin + local / cache.n_head_kv;
      int64_t g = local % cache.n_head_kv;
      attend(q, seq, r, positions[r], g, cache, n_head, n_rep, scale, window, out, scratch);
    }
  });
}

}  // namespace actorllm::cpu
