// Paged attention with an online softmax per work item.
#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/simd.hpp"
#include "util/check.hpp"

namespace actorllm::cpu {
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

constexpr int W = simd::width;  // keys per step: one vector of scores

// acc[0 .. n) *= c.
void scale_in_place(float* acc, float c, int64_t n) {
  const simd::vf vc = simd::set1(c);
  int64_t i = 0;
  for (; i + W <= n; i += W)
    simd::store(acc + i, simd::mul(vc, simd::load(acc + i)));
  for (; i < n; ++i)
    acc[i] *= c;
}

// acc[0 .. n) += p * v[0 .. n).
void axpy(float* acc, float p, const float* v, int64_t n) {
  const simd::vf vp = simd::set1(p);
  int64_t i = 0;
  for (; i + W <= n; i += W)
    simd::store(acc + i, simd::fmadd(vp, simd::load(v + i), simd::load(acc + i)));
  for (; i < n; ++i)
    acc[i] += p * v[i];
}

// acc = acc * correction + sum over k in [k_lo, k_hi) of p[k] * v[k] (v rows row_stride floats apart), head_dim hd.
// Head sizes of up to 8 vectors keep acc in registers for the whole step.
template <int NV>
void accumulate_values_regs(float* acc, float correction, const float* p, int64_t k_lo, int64_t k_hi, const float* v,
                            int64_t row_stride) {
  simd::vf a[NV];
  const simd::vf c = simd::set1(correction);
  for (int i = 0; i < NV; ++i)
    a[i] = simd::mul(c, simd::load(acc + i * W));
  for (int64_t k = k_lo; k < k_hi; ++k) {
    const simd::vf pk = simd::set1(p[k]);
    const float* vk = v + k * row_stride;
    for (int i = 0; i < NV; ++i)
      a[i] = simd::fmadd(pk, simd::load(vk + i * W), a[i]);
  }
  for (int i = 0; i < NV; ++i)
    simd::store(acc + i * W, a[i]);
}

void accumulate_values(float* acc, float correction, const float* p, int64_t k_lo, int64_t k_hi, const float* v,
                       int64_t row_stride, int64_t hd) {
  if (hd % W == 0 && hd / W <= 8 && W > 1) {
    switch (hd / W) {
      case 1:
        return accumulate_values_regs<1>(acc, correction, p, k_lo, k_hi, v, row_stride);
      case 2:
        return accumulate_values_regs<2>(acc, correction, p, k_lo, k_hi, v, row_stride);
      case 3:
        return accumulate_values_regs<3>(acc, correction, p, k_lo, k_hi, v, row_stride);
      case 4:
        return accumulate_values_regs<4>(acc, correction, p, k_lo, k_hi, v, row_stride);
      case 5:
        return accumulate_values_regs<5>(acc, correction, p, k_lo, k_hi, v, row_stride);
      case 6:
        return accumulate_values_regs<6>(acc, correction, p, k_lo, k_hi, v, row_stride);
      case 7:
        return accumulate_values_regs<7>(acc, correction, p, k_lo, k_hi, v, row_stride);
      default:
        return accumulate_values_regs<8>(acc, correction, p, k_lo, k_hi, v, row_stride);
    }
  }
  if (correction != 1.0f)
    scale_in_place(acc, correction, hd);
  for (int64_t k = k_lo; k < k_hi; ++k)
    axpy(acc, p[k], v + k * row_stride, hd);
}

// The same for NP query heads of one row at once (they see the same keys): each value vector is loaded once for all
// of them. acc[i], correction[i] and p[i] belong to head i.
template <int NV, int NP>
void accumulate_values_group(float* const* acc, const float* correction, const float (*p)[W], int64_t k_lo,
                             int64_t k_hi, const float* v, int64_t row_stride) {
  simd::vf a[NP][NV];
  for (int j = 0; j < NP; ++j) {
    const simd::vf c = simd::set1(correction[j]);
    for (int i = 0; i < NV; ++i)
      a[j][i] = simd::mul(c, simd::load(acc[j] + i * W));
  }
  for (int64_t k = k_lo; k < k_hi; ++k) {
    const float* vk = v + k * row_stride;
    simd::vf vv[NV];
    for (int i = 0; i < NV; ++i)
      vv[i] = simd::load(vk + i * W);
    for (int j = 0; j < NP; ++j) {
      const simd::vf pk = simd::set1(p[j][k]);
      for (int i = 0; i < NV; ++i)
        a[j][i] = simd::fmadd(pk, vv[i], a[j][i]);
    }
  }
  for (int j = 0; j < NP; ++j)
    for (int i = 0; i < NV; ++i)
      simd::store(acc[j] + i * W, a[j][i]);
}

// accumulate_values for n (<= 4) heads of one row, grouped where the head size allows.
void accumulate_values_heads(float* const* acc, const float* correction, const float (*p)[W], int64_t n, int64_t k_lo,
                             int64_t k_hi, const float* v, int64_t row_stride, int64_t hd) {
  if (W > 1 && n == 4 && hd == 4 * W)
    return accumulate_values_group<4, 4>(acc, correction, p, k_lo, k_hi, v, row_stride);
  if (W > 1 && n == 4 && hd == 2 * W)
    return accumulate_values_group<2, 4>(acc, correction, p, k_lo, k_hi, v, row_stride);
  if (W > 1 && n >= 2 && hd == 8 * W) {
    accumulate_values_group<8, 2>(acc, correction, p, k_lo, k_hi, v, row_stride);
    if (n == 4)
      accumulate_values_group<8, 2>(acc + 2, correction + 2, p + 2, k_lo, k_hi, v, row_stride);
    else if (n == 3)
      accumulate_values(acc[2], correction[2], p[2], k_lo, k_hi, v, row_stride, hd);
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    accumulate_values(acc[j], correction[j], p[j], k_lo, k_hi, v, row_stride, hd);
}

struct tile_scratch {
  std::vector<float> kt;      // [head_dim][W]: the current keys, transposed (a key per lane)
  std::vector<float> kf, vf;  // [W][head_dim]: the current keys and values widened to f32 (a bf16 or f16 cache)
  std::vector<float> acc;     // [pairs][head_dim]: running weighted sums of v
  std::vector<float> row_max, row_sum;
  std::vector<float> q;                 // [pairs][head_dim]: the queries, pre-multiplied by the scale
  std::vector<int64_t> key_lo, key_hi;  // [rows]: the local key indices [lo, hi) each row sees
};

// kt[d][k] = key k's element d for k < n (the keys row_stride floats apart), zero for k >= n.
void transpose_keys(const float* keys, int64_t row_stride, int64_t n, int64_t hd, float* kt) {
#if defined(ACTORLLM_SIMD_AVX512)
  if (hd % 16 == 0) {
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
      __m512 r[16];
      for (int64_t k = 0; k < 16; ++k)
        r[k] = k < n ? _mm512_loadu_ps(keys + k * row_stride + d0) : _mm512_setzero_ps();
      simd::transpose16(r);
      for (int64_t d = 0; d < 16; ++d)
        _mm512_storeu_ps(kt + (d0 + d) * W, r[d]);
    }
    return;
  }
#endif
  for (int64_t d = 0; d < hd; ++d)
    for (int64_t k = 0; k < W; ++k)
      kt[d * W + k] = k < n ? keys[k * row_stride + d] : 0.0f;
}

// One work item: query rows [r0, r1) of one sequence (consecutive positions of a prefill chunk, or one decode row)
// against kv head g, for the n_rep query heads that share it: every (row, head) pair walks the cache W keys at a
// time. The keys are transposed once per step for all pairs, so each score vector is head_dim FMAs with no
// horizontal sums; each pair keeps an online softmax (running max and sum, rescaled when the max grows).
//
// Keys are walked by their local index in this rank's cache (kv_shard_layout): every position under the plain
// layout, this rank's share of them under decode context parallelism. Each row sees the local indices of the
// positions in its window, [local_count(first), local_count(pos + 1)).
void attend_tile(const float* q, const int32_t* positions, const attention_seq& seq, int64_t r0, int64_t r1, int64_t g,
                 const paged_kv_view& cache, const kv_shard_layout& layout, int64_t n_head, int64_t n_rep, float scale,
                 int64_t window, float* out, float* lse, tile_scratch& s) {
  const int64_t hd = cache.head_dim, bs = cache.block_size;
  const int64_t n_rows = r1 - r0, n_pairs = n_rows * n_rep;
  int64_t ctx_end = 0, ctx_first = INT64_MAX;  // local keys any row sees: [ctx_first, ctx_end)
  s.key_lo.resize(static_cast<size_t>(n_rows));
  s.key_hi.resize(static_cast<size_t>(n_rows));
  for (int64_t r = r0; r < r1; ++r) {
    ACTORLLM_CHECK(positions[r] >= 0, "paged_attention: negative position");
    const int64_t n_ctx = static_cast<int64_t>(positions[r]) + 1;
    const int64_t hi = layout.local_count(n_ctx);
    const int64_t lo = layout.local_count(window > 0 ? std::max<int64_t>(0, n_ctx - window) : int64_t{0});
    ACTORLLM_CHECK(hi <= static_cast<int64_t>(seq.n_blocks) * bs,
                   "paged_attention: position beyond the sequence's blocks");
    s.key_lo[static_cast<size_t>(r - r0)] = lo;
    s.key_hi[static_cast<size_t>(r - r0)] = hi;
    ctx_end = std::max(ctx_end, hi);
    ctx_first = std::min(ctx_first, lo);
  }
  s.kt.resize(static_cast<size_t>(hd * W));
  s.acc.assign(static_cast<size_t>(n_pairs * hd), 0.0f);
  s.row_max.assign(static_cast<size_t>(n_pairs), neg_inf);
  s.row_sum.assign(static_cast<size_t>(n_pairs), 0.0f);
  s.q.resize(static_cast<size_t>(n_pairs * hd));
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < n_rep; ++j) {
      const float* src = q + (r * n_head + g * n_rep + j) * hd;
      float* dst = s.q.data() + ((r - r0) * n_rep + j) * hd;
      for (int64_t d = 0; d < hd; ++d)
        dst[d] = src[d] * scale;
    }
  const int64_t row_stride = cache.n_head_kv * hd;  // elements between consecutive slots
  const bool widen = cache.type != dtype::f32;      // keys and values are copied to f32 step by step
  const size_t esize = dtype_size(cache.type);
  if (widen) {
    s.kf.resize(static_cast<size_t>(W * hd));
    s.vf.resize(static_cast<size_t>(W * hd));
  }
  alignas(64) float p[W];
  alignas(64) float pg[4][W];  // probabilities of the (up to) four heads scored together
  float corrections[4];
  float* accs[4];

  // Blocks before the earliest window's first block are never touched (not even their table entries).
  for (int64_t b = ctx_first / bs; b * bs < ctx_end; ++b) {
    const int32_t blk = seq.block_table[b];
    ACTORLLM_CHECK(blk >= 0 && blk < cache.n_blocks, "paged_attention: block id out of range");
    const int64_t block_lo = std::max<int64_t>(ctx_first - b * bs, 0);
    const int64_t block_hi = std::min(bs, ctx_end - b * bs);
    for (int64_t lo = block_lo; lo < block_hi; lo += W) {
      const int64_t n = std::min<int64_t>(W, block_hi - lo);
      const int64_t key0 = b * bs + lo;  // local index of the step's first key
      const int64_t first = (static_cast<int64_t>(blk) * bs + lo) * row_stride + g * hd;  // element offset
      const float* kb = nullptr;
      const float* vb = nullptr;
      int64_t stride = row_stride;  // between the step's key (value) rows as read below
      if (!widen) {
        kb = static_cast<const float*>(cache.k) + first;
        vb = static_cast<const float*>(cache.v) + first;
      } else {
        const auto* k_bytes = static_cast<const std::byte*>(cache.k) + static_cast<size_t>(first) * esize;
        const auto* v_bytes = static_cast<const std::byte*>(cache.v) + static_cast<size_t>(first) * esize;
        for (int64_t k = 0; k < n; ++k) {
          const size_t at = static_cast<size_t>(k * row_stride) * esize;
          convert_to_f32(k_bytes + at, cache.type, hd, s.kf.data() + k * hd);
          convert_to_f32(v_bytes + at, cache.type, hd, s.vf.data() + k * hd);
        }
        kb = s.kf.data();
        vb = s.vf.data();
        stride = hd;
      }
      transpose_keys(kb, stride, n, hd, s.kt.data());
      for (int64_t r = r0; r < r1; ++r) {
        // The keys of this step that row r sees: [see_lo, see_hi) of the step's lanes.
        const int64_t see_lo = std::max<int64_t>(s.key_lo[static_cast<size_t>(r - r0)] - key0, 0);
        const int64_t see_hi = std::min<int64_t>(s.key_hi[static_cast<size_t>(r - r0)] - key0, n);
        if (see_lo >= see_hi)
          continue;
        // Scores of up to four query heads at once: each transposed key vector is loaded once for the four, and
        // eight independent FMA chains hide the latency. (Fewer than four heads left: the last one is repeated and
        // its extra scores dropped.)
        for (int64_t j0 = 0; j0 < n_rep; j0 += 4) {
          const int64_t nj = std::min<int64_t>(4, n_rep - j0);
          const float* qp[4];
          simd::vf sc[4][2];
          for (int64_t jj = 0; jj < 4; ++jj) {
            qp[jj] = s.q.data() + ((r - r0) * n_rep + j0 + std::min(jj, nj - 1)) * hd;
            sc[jj][0] = simd::zero();
            sc[jj][1] = simd::zero();
          }
          const float* kt = s.kt.data();
          int64_t d = 0;
          for (; d + 1 < hd; d += 2) {
            const simd::vf k0 = simd::load(kt + d * W), k1 = simd::load(kt + (d + 1) * W);
            for (int64_t jj = 0; jj < 4; ++jj) {
              sc[jj][0] = simd::fmadd(simd::set1(qp[jj][d]), k0, sc[jj][0]);
              sc[jj][1] = simd::fmadd(simd::set1(qp[jj][d + 1]), k1, sc[jj][1]);
            }
          }
          if (d < hd) {
            const simd::vf k0 = simd::load(kt + d * W);
            for (int64_t jj = 0; jj < 4; ++jj)
              sc[jj][0] = simd::fmadd(simd::set1(qp[jj][d]), k0, sc[jj][0]);
          }
          for (int64_t jj = 0; jj < nj; ++jj) {
            const int64_t pair = (r - r0) * n_rep + j0 + jj;
            simd::vf scores = simd::add(sc[jj][0], sc[jj][1]);
            if (see_lo > 0 || see_hi < W) {  // the diagonal, a window's edge or a short step: mask the unseen keys
              simd::store(p, scores);
              for (int64_t k = 0; k < W; ++k)
                if (k < see_lo || k >= see_hi)
                  p[k] = neg_inf;
              scores = simd::load(p);
            }
            float& m = s.row_max[static_cast<size_t>(pair)];
            const float new_max = std::max(m, simd::reduce_max(scores));
            // Rescale what was accumulated under the old max (exp(-inf) = 0 on the first step).
            const float correction = new_max == m ? 1.0f : simd::exp_scalar(m - new_max);
            m = new_max;
            const simd::vf e = simd::exp(simd::sub(scores, simd::set1(new_max)));
            simd::store(p, e);
            float& l = s.row_sum[static_cast<size_t>(pair)];
            l = l * correction + simd::reduce_add(e);
            std::memcpy(pg[jj], p, sizeof p);
            corrections[jj] = correction;
            accs[jj] = s.acc.data() + pair * hd;
          }
          accumulate_values_heads(accs, corrections, pg, nj, see_lo, see_hi, vb, stride, hd);
        }
      }
    }
  }

  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < n_rep; ++j) {
      const int64_t pair = (r - r0) * n_rep + j;
      float* o = out + (r * n_head + g * n_rep + j) * hd;
      const float sum = s.row_sum[static_cast<size_t>(pair)];
      // A row that sees no key here (its positions all on other ranks): nothing, of weight exp(-inf) = 0.
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const float* acc = s.acc.data() + pair * hd;
      for (int64_t d = 0; d < hd; ++d)
        o[d] = acc[d] * inv;
      if (lse != nullptr)
        lse[r * n_head + g * n_rep + j] = sum > 0.0f ? s.row_max[static_cast<size_t>(pair)] + std::log(sum) : neg_inf;
    }
}

// Query rows per work item: enough pairs to amortise each key step's transpose, few enough to keep the items many.
constexpr int64_t tile_rows = 4;

}  // namespace

void write_kv(const paged_kv_view& cache, const float* k, const float* v, const int64_t* slot_mapping,
              int64_t n_tokens) {
  const int64_t row = cache.n_head_kv * cache.head_dim;
  const int64_t capacity = cache.n_blocks * cache.block_size;
  ACTORLLM_CHECK(cache.type == dtype::f32 || cache.type == dtype::bf16 || cache.type == dtype::f16,
                 "write_kv: the CPU KV cache holds f32, bf16 or f16");
  const size_t row_bytes = static_cast<size_t>(row) * dtype_size(cache.type);
  for (int64_t t = 0; t < n_tokens; ++t) {
    int64_t slot = slot_mapping[t];
    if (slot < 0)
      continue;
    ACTORLLM_CHECK(slot < capacity, "write_kv: slot beyond the cache");
    convert_from_f32(k + t * row, row, cache.type,
                     static_cast<std::byte*>(cache.k) + static_cast<size_t>(slot) * row_bytes);
    convert_from_f32(v + t * row, row, cache.type,
                     static_cast<std::byte*>(cache.v) + static_cast<size_t>(slot) * row_bytes);
  }
}

void paged_attention(const float* q, const int32_t* positions, const attention_seq* seqs, int64_t n_seqs,
                     const paged_kv_view& cache, int64_t n_head, float scale, float* out, thread_pool& pool,
                     int64_t window, const kv_shard_layout& layout, float* lse) {
  ACTORLLM_CHECK(cache.n_head_kv > 0 && n_head % cache.n_head_kv == 0,
                 "paged_attention: n_head must be a multiple of n_head_kv");
  ACTORLLM_CHECK(cache.type == dtype::f32 || cache.type == dtype::bf16 || cache.type == dtype::f16,
                 "paged_attention: the CPU KV cache holds f32, bf16 or f16");
  const int64_t n_rep = n_head / cache.n_head_kv;
  // Work item w maps to (sequence, tile of query rows, kv head) through prefix sums over the sequences.
  // Reused across calls (no allocation once warm); the reference, not the thread_local, is what the workers see.
  thread_local std::vector<int64_t> first_item_storage;
  std::vector<int64_t>& first_item = first_item_storage;
  first_item.assign(static_cast<size_t>(n_seqs) + 1, 0);
  for (int64_t s = 0; s < n_seqs; ++s)
    first_item[static_cast<size_t>(s) + 1] =
        first_item[static_cast<size_t>(s)] + (seqs[s].n_query + tile_rows - 1) / tile_rows * cache.n_head_kv;
  const int64_t n_items = first_item.back();

  // Items differ in cost (a long prefix versus a short one), so they are handed out dynamically.
  pool.parallel_for_dynamic(n_items, 1, [&](int64_t begin, int64_t end) {
    thread_local tile_scratch scratch;
    for (int64_t w = begin; w < end; ++w) {
      auto it = std::upper_bound(first_item.begin(), first_item.end(), w);
      auto s = static_cast<int64_t>(it - first_item.begin()) - 1;
      int64_t local = w - first_item[static_cast<size_t>(s)];
      const attention_seq& seq = seqs[s];
      const int64_t r0 = seq.query_begin + local / cache.n_head_kv * tile_rows;
      const int64_t r1 = std::min<int64_t>(r0 + tile_rows, seq.query_begin + seq.n_query);
      const int64_t g = local % cache.n_head_kv;
      attend_tile(q, positions, seq, r0, r1, g, cache, layout, n_head, n_rep, scale, window, out, lse, scratch);
    }
  });
}

void merge_attention_partials(const float* parts, const float* lses, int64_t n_parts, int64_t n_tokens,
                              int64_t n_head_all, int64_t head_begin, int64_t n_head, int64_t head_dim, float* out,
                              int64_t row_begin, int64_t row_end) {
  const int64_t part_stride = n_tokens * n_head_all;  // (row, head) pairs per part
  if (row_end < 0)
    row_end = n_tokens;
  for (int64_t t = row_begin; t < row_end; ++t)
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t pair = t * n_head_all + head_begin + h;
      float m = neg_inf;
      for (int64_t p = 0; p < n_parts; ++p)
        m = std::max(m, lses[p * part_stride + pair]);
      float* o = out + (t * n_head + h) * head_dim;
      std::fill_n(o, head_dim, 0.0f);
      if (m == neg_inf)  // no part saw a key: cannot happen for a causal row (it sees itself), kept finite anyway
        continue;
      float total = 0.0f;
      for (int64_t p = 0; p < n_parts; ++p) {
        const float w = std::exp(lses[p * part_stride + pair] - m);
        total += w;
        const float* src = parts + (p * part_stride + pair) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d)
          o[d] += w * src[d];
      }
      const float inv = 1.0f / total;
      for (int64_t d = 0; d < head_dim; ++d)
        o[d] *= inv;
    }
}

}  // namespace actorllm::cpu
