// Paged attention with an online softmax per work item.
#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/simd.hpp"
#include "util/check.hpp"

namespace actorllm::cpu {
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

template <dtype D>
using elem_t = std::conditional_t<D == dtype::f32, float, uint16_t>;

constexpr int W = simd::width;  // keys per score vector
constexpr int KW = 2 * W;       // keys per step: two vectors of scores
constexpr int max_group = 8;    // (row, head) pairs taken together: each key vector loaded once for all of them
// Pairs per score_keys call: 2 x NP accumulators, 2 key vectors and a broadcast in AVX2's 16 registers (8 spilled:
// see accumulate_values_pairs_avx2).
constexpr int score_group = W == 8 ? 6 : max_group;

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

// acc = acc * correction + sum over k in [k_lo, k_hi) of p[k] * v[k], head_dim hd; v[k] points at value row k, f32 or
// (D = bf16, f16) widened as it loads. Head sizes of up to 8 vectors keep acc in registers for the whole step.
template <int NV, dtype D>
void accumulate_values_regs(float* acc, float correction, const float* p, int64_t k_lo, int64_t k_hi,
                            const void* const* v) {
  simd::vf a[NV];
  const simd::vf c = simd::set1(correction);
  for (int i = 0; i < NV; ++i)
    a[i] = simd::mul(c, simd::load(acc + i * W));
  for (int64_t k = k_lo; k < k_hi; ++k) {
    const simd::vf pk = simd::set1(p[k]);
    for (int i = 0; i < NV; ++i)
      a[i] = simd::fmadd(pk, simd::load_as<D>(v[k], i * W), a[i]);
  }
  for (int i = 0; i < NV; ++i)
    simd::store(acc + i * W, a[i]);
}

// Register budget of the grouped kernels below: NP x NV accumulators, NV value vectors and a broadcast. AVX-512 has 32
// vector registers, AVX2 16: there the pairs go two at a time over chunks of up to 4 vectors of the head
// (accumulate_values_pairs), and scores at most 6 pairs at a time (attend_tile).
constexpr bool few_registers = W == 8;

// Whether the value rows of a bf16 or f16 cache are read in place (every accumulation path below widens as it
// loads): head sizes of whole vectors, up to 8 of them (any number with AVX2, whose path takes the head in chunks).
constexpr bool values_any_type(int64_t hd) { return W > 1 && hd % W == 0 && (few_registers || hd / W <= 8); }

template <dtype D>
void accumulate_values(float* acc, float correction, const float* p, int64_t k_lo, int64_t k_hi, const void* const* v,
                       int64_t hd) {
  if (values_any_type(hd)) {
    switch (hd / W) {
      case 1:
        return accumulate_values_regs<1, D>(acc, correction, p, k_lo, k_hi, v);
      case 2:
        return accumulate_values_regs<2, D>(acc, correction, p, k_lo, k_hi, v);
      case 3:
        return accumulate_values_regs<3, D>(acc, correction, p, k_lo, k_hi, v);
      case 4:
        return accumulate_values_regs<4, D>(acc, correction, p, k_lo, k_hi, v);
      case 5:
        return accumulate_values_regs<5, D>(acc, correction, p, k_lo, k_hi, v);
      case 6:
        return accumulate_values_regs<6, D>(acc, correction, p, k_lo, k_hi, v);
      case 7:
        return accumulate_values_regs<7, D>(acc, correction, p, k_lo, k_hi, v);
      default:
        return accumulate_values_regs<8, D>(acc, correction, p, k_lo, k_hi, v);
    }
  }
  if constexpr (D == dtype::f32) {
    if (correction != 1.0f)
      scale_in_place(acc, correction, hd);
    for (int64_t k = k_lo; k < k_hi; ++k)
      axpy(acc, p[k], static_cast<const float*>(v[k]), hd);
  } else {
    ACTORLLM_CHECK(false, "paged_attention: values widened in place need whole vectors");
  }
}

// The same for NP (row, head) pairs at once (they see the same step of keys): each value vector is loaded once for
// all of them. acc[i], correction[i] and p[i] belong to pair i.
template <int NV, int NP, dtype D>
void accumulate_values_group(float* const* acc, const float* correction, const float (*p)[KW], int64_t k_lo,
                             int64_t k_hi, const void* const* v) {
  simd::vf a[NP][NV];
  for (int j = 0; j < NP; ++j) {
    const simd::vf c = simd::set1(correction[j]);
    for (int i = 0; i < NV; ++i)
      a[j][i] = simd::mul(c, simd::load(acc[j] + i * W));
  }
  for (int64_t k = k_lo; k < k_hi; ++k) {
    simd::vf vv[NV];
    for (int i = 0; i < NV; ++i)
      vv[i] = simd::load_as<D>(v[k], i * W);
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

// accumulate_values_group<nv, NP> for nv of 1 to 4 vectors.
template <int NP, dtype D>
void accumulate_values_group_of(int nv, float* const* acc, const float* correction, const float (*p)[KW], int64_t k_lo,
                                int64_t k_hi, const void* const* v) {
  switch (nv) {
    case 4:
      return accumulate_values_group<4, NP, D>(acc, correction, p, k_lo, k_hi, v);
    case 3:
      return accumulate_values_group<3, NP, D>(acc, correction, p, k_lo, k_hi, v);
    case 2:
      return accumulate_values_group<2, NP, D>(acc, correction, p, k_lo, k_hi, v);
    default:
      return accumulate_values_group<1, NP, D>(acc, correction, p, k_lo, k_hi, v);
  }
}

// With AVX2's 16 registers (hd a multiple of W): pairs two at a time (one left over alone) over chunks of up to 4
// vectors of the head, 8 accumulators, 4 value vectors and a broadcast. The AVX-512 groups below for a head of 8
// vectors (2 x 8 accumulators and 8 value vectors) spilled here: TinyLlama's heads (64 wide), 32 pairs per prefill
// tile, f32 cache, 2048-token prompt: 356 ms a layer (48 GFLOP/s) before.
template <dtype D>
void accumulate_values_pairs_avx2(float* const* acc, const float* correction, const float (*p)[KW], int64_t n,
                                  int64_t k_lo, int64_t k_hi, const void* const* v, int64_t hd) {
  const void* v_at[KW];  // the value rows from the chunk's first element on
  for (int64_t e0 = 0; e0 < hd; e0 += 4 * W) {
    const int nv = static_cast<int>(std::min<int64_t>(4, (hd - e0) / W));
    for (int64_t k = k_lo; k < k_hi; ++k)
      v_at[k] = static_cast<const elem_t<D>*>(v[k]) + e0;
    for (int64_t j = 0; j < n; j += 2) {
      float* acc_at[2] = {acc[j] + e0, j + 1 < n ? acc[j + 1] + e0 : nullptr};
      if (j + 1 < n)
        accumulate_values_group_of<2, D>(nv, acc_at, correction + j, p + j, k_lo, k_hi, v_at);
      else
        accumulate_values_group_of<1, D>(nv, acc_at, correction + j, p + j, k_lo, k_hi, v_at);
    }
  }
}

// accumulate_values for n (<= 4) pairs, grouped where the head size allows.
template <dtype D>
void accumulate_values_pairs(float* const* acc, const float* correction, const float (*p)[KW], int64_t n, int64_t k_lo,
                             int64_t k_hi, const void* const* v, int64_t hd) {
  if (few_registers && hd % W == 0)
    return accumulate_values_pairs_avx2<D>(acc, correction, p, n, k_lo, k_hi, v, hd);
  if (W > 1 && n == 4 && hd == 4 * W)
    return accumulate_values_group<4, 4, D>(acc, correction, p, k_lo, k_hi, v);
  if (W > 1 && n == 4 && hd == 2 * W)
    return accumulate_values_group<2, 4, D>(acc, correction, p, k_lo, k_hi, v);
  if (W > 1 && n >= 2 && hd == 8 * W) {
    accumulate_values_group<8, 2, D>(acc, correction, p, k_lo, k_hi, v);
    if (n == 4)
      accumulate_values_group<8, 2, D>(acc + 2, correction + 2, p + 2, k_lo, k_hi, v);
    else if (n == 3)
      accumulate_values<D>(acc[2], correction[2], p[2], k_lo, k_hi, v, hd);
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    accumulate_values<D>(acc[j], correction[j], p[j], k_lo, k_hi, v, hd);
}

// accumulate_values for 8 pairs of a head of 4 vectors (a decode row of 8 query heads a kv head: Llama 3, TinyLlama),
// each half of the head (2 vectors) for all 8 pairs at once (16 accumulators): each value vector is widened once, where
// two groups of 4 pairs widened each twice, and the port time goes to the FMAs (the widening shares their ports; the
// probabilities' broadcasts are loads). The same sums in the same order.
template <dtype D>
void accumulate_values_eight_halves(float* const* acc, const float* correction, const float (*p)[KW], int64_t k_lo,
                                    int64_t k_hi, const void* const* v) {
  const void* v_at[KW];
  float* acc_at[8];
  for (int64_t half = 0; half < 2; ++half) {
    for (int64_t k = k_lo; k < k_hi; ++k)
      v_at[k] = static_cast<const elem_t<D>*>(v[k]) + half * 2 * W;
    for (int j = 0; j < 8; ++j)
      acc_at[j] = acc[j] + half * 2 * W;
    accumulate_values_group<2, 8, D>(acc_at, correction, p, k_lo, k_hi, v_at);
  }
}

// accumulate_values for a group's n (<= max_group) pairs: 8 pairs of a head of 4 vectors half a head at a time,
// others 4 pairs at a time.
template <dtype D>
void accumulate_values_group_pairs(float* const* acc, const float* correction, const float (*p)[KW], int64_t n,
                                   int64_t k_lo, int64_t k_hi, const void* const* v, int64_t hd) {
  if (!few_registers && n == 8 && hd == 4 * W)
    return accumulate_values_eight_halves<D>(acc, correction, p, k_lo, k_hi, v);
  for (int64_t i = 0; i < n; i += 4)
    accumulate_values_pairs<D>(acc + i, correction + i, p + i, std::min<int64_t>(4, n - i), k_lo, k_hi, v, hd);
}

// f(std::integral_constant<dtype, D>{}) for D = `type`, the element type of rows read from a CPU cache in place (f32,
// bf16 or f16): the kernels above and below are templates on it.
template <class F>
void with_row_type(dtype type, F&& f) {
  if (type == dtype::bf16)
    return f(std::integral_constant<dtype, dtype::bf16>{});
  if (type == dtype::f16)
    return f(std::integral_constant<dtype, dtype::f16>{});
  f(std::integral_constant<dtype, dtype::f32>{});
}

// scores[j][k] = dot(q[j], key k) for NP queries against the step's KW keys (kt: [hd][KW], a key per lane). Each
// key vector is loaded once for the NP queries, and 2 * NP independent FMA chains hide the latency.
template <int NP>
void score_keys(const float* const* q, const float* kt, int64_t hd, float (*scores)[KW]) {
  simd::vf a[NP][2];
  for (int j = 0; j < NP; ++j)
    a[j][0] = a[j][1] = simd::zero();
  for (int64_t d = 0; d < hd; ++d) {
    const simd::vf k0 = simd::load(kt + d * KW), k1 = simd::load(kt + d * KW + W);
    for (int j = 0; j < NP; ++j) {
      const simd::vf qd = simd::set1(q[j][d]);
      a[j][0] = simd::fmadd(qd, k0, a[j][0]);
      a[j][1] = simd::fmadd(qd, k1, a[j][1]);
    }
  }
  for (int j = 0; j < NP; ++j) {
    simd::store(scores[j], a[j][0]);
    simd::store(scores[j] + W, a[j][1]);
  }
}

using score_fn = void (*)(const float* const*, const float*, int64_t, float (*)[KW]);

template <size_t... I>
constexpr std::array<score_fn, sizeof...(I)> score_table(std::index_sequence<I...>) {
  return {&score_keys<static_cast<int>(I) + 1>...};
}

// dst[0 .. n) = src's n elements of type `type` as f32 (exact), inline for a bf16 or f16 row of whole vectors: a step
// widens 2 x KW rows, and convert_to_f32's call per row cost a bf16 cache's batch-1 decode at 2048 positions a third
// of its attention time.
template <dtype D>
void widen_vectors(const void* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += W)
    simd::store(dst + i, simd::load_as<D>(src, i));
}

void widen_row(const std::byte* src, dtype type, int64_t n, float* dst) {
  if (W > 1 && n % W == 0 && type == dtype::bf16)
    return widen_vectors<dtype::bf16>(src, n, dst);
  if (W > 1 && n % W == 0 && type == dtype::f16)
    return widen_vectors<dtype::f16>(src, n, dst);
  convert_to_f32(src, type, n, dst);
}

struct tile_scratch {
  std::vector<float> kt;      // [head_dim][KW]: the current keys, transposed (a key per lane)
  std::vector<float> kf, vf;  // [KW][head_dim]: the current keys and values widened to f32, where not read in place
  std::vector<float> acc;     // [pairs][head_dim]: running weighted sums of v
  std::vector<float> row_max, row_sum;
  std::vector<float> q;                 // [pairs][head_dim]: the queries, pre-multiplied by the scale
  std::vector<int64_t> key_lo, key_hi;  // [rows]: the local key indices [lo, hi) each row sees
};

// Whether transpose_keys reads bf16 and f16 keys in place (widening them as it loads), with no copy to f32 first.
constexpr bool transposes_any_type(int64_t hd) {
#if defined(ACTORLLM_SIMD_AVX512) || defined(ACTORLLM_SIMD_AVX2)
  return hd % W == 0;
#else
  (void)hd;
  return false;
#endif
}

// kt[d][k] = element d of key k for k < n, zero for n <= k < KW; keys[k] points at key k's hd elements of type D
// (D other than f32 only where transposes_any_type(hd)).
template <dtype D>
void transpose_keys(const void* const* keys, int64_t n, int64_t hd, float* kt) {
#if defined(ACTORLLM_SIMD_AVX512) || defined(ACTORLLM_SIMD_AVX2)
  if (hd % W == 0) {
    for (int64_t k0 = 0; k0 < KW; k0 += W)
      for (int64_t d0 = 0; d0 < hd; d0 += W) {
        simd::vf r[W];
        for (int64_t k = 0; k < W; ++k)
          r[k] = k0 + k < n ? simd::load_as<D>(keys[k0 + k], d0) : simd::zero();
        simd::transpose(r);
        for (int64_t d = 0; d < W; ++d)
          simd::store(kt + (d0 + d) * KW + k0, r[d]);
      }
    return;
  }
#endif
  if constexpr (D == dtype::f32) {
    for (int64_t d = 0; d < hd; ++d)
      for (int64_t k = 0; k < KW; ++k)
        kt[d * KW + k] = k < n ? static_cast<const float*>(keys[k])[d] : 0.0f;
  } else {
    // Only the vector transposes widen as they load; transposes_any_type keeps other builds' keys in f32.
    ACTORLLM_CHECK(false, "paged_attention: bf16/f16 keys reached the transpose without a vector transpose");
  }
}

// Whether prefetch_rows asks for its lines into L2 (T1) rather than into L1 (T0): on Intel. There every line a step
// asks for holds one of L1's few fill buffers until it arrives, and the stalled prefetches took 40% of a decode row's
// step even with the rows in L3. A 2-vCPU Xeon (AMX; session 50), one decode row at 4,096 positions, bf16 cache,
// TinyLlama's heads, 2 threads, cold (the caches evicted before each call) / warm, medians of 300 calls in alternated
// runs: T1 410 and 412 us / 282 and 313 us against T0's 446 and 452 / 321 and 329 (no prefetch 478 and 520 / 297-299).
// Zen keeps T0, as measured there (below).
bool attention_prefetch_into_l2() {
  static const bool intel = cpu_vendor() == "GenuineIntel";
  return intel;
}

// Asks the caches for kv head g's key and value rows at local keys [key0, key0 + n) of `seq`. A decode row reads each
// of its keys once, in runs of a block's rows (kv heads outer) or a row of every slot (slot by slot), which the
// hardware prefetchers do not fetch ahead far enough, and in a decode step the weights streamed since the previous
// layer have evicted them: read as they come, the gather waits on memory. `bench_kernels` attention cases with "cold"
// in their names (the caches evicted before each call), 2-vCPU Zen 5 VM, bf16 cache, one step ahead against none,
// alternated (8-10 pairs each): slot by slot, 32 rows at 512 positions 0.90-0.95x the time, 8 rows at 1,024 0.93x,
// one row at 512 0.89x, an f32 cache 0.98x; also two steps ahead into L2 0.975x, only that 0.981x. Heads outer, 32
// rows at 512 positions: 0.70x with the prefetch against the slot-by-slot layout without, 0.93x without. A prefill
// tile's rows share their keys, which stay in the caches from one tile to the next: there it only costs, so prefill
// tiles do not ask.
// Always inlined: as an ordinary function GCC 12 at -O3 dropped its calls (no prefetch was left in the object).
[[gnu::always_inline]] inline void prefetch_rows(const attention_seq& seq, const paged_kv_view& cache, int64_t g,
                                                 int64_t key0, int64_t n) {
  const int64_t bs = cache.block_size;
  const size_t esize = dtype_size(cache.type), row_bytes = static_cast<size_t>(cache.head_dim) * esize;
  const size_t stride = static_cast<size_t>(cache.block_row_stride()) * esize;
  const auto* k = static_cast<const char*>(cache.k);
  const auto* v = static_cast<const char*>(cache.v);
  const bool into_l2 = attention_prefetch_into_l2();
  auto ask = [into_l2](const char* line) {
    if (into_l2)
      __builtin_prefetch(line, 0, 2);
    else
      __builtin_prefetch(line, 0, 3);
  };
  // The keys of a block at a time: one table entry for each run of them, and under heads outer one contiguous run of
  // rows (row_bytes apart).
  for (int64_t key = key0, end = key0 + n; key < end;) {
    const int64_t offset = key % bs, rows = std::min(bs - offset, end - key);
    const int32_t blk = seq.block_table[key / bs];
    key += rows;
    if (blk < 0 || blk >= cache.n_blocks)
      continue;  // refused when its step is read
    const size_t at = static_cast<size_t>(cache.row_at(blk, offset, g)) * esize;
    for (int64_t r = 0; r < rows; ++r)
      for (size_t b = 0; b < row_bytes; b += 64) {
        ask(k + at + static_cast<size_t>(r) * stride + b);
        ask(v + at + static_cast<size_t>(r) * stride + b);
      }
  }
}

// One work item: query rows [r0, r1) of one sequence (consecutive positions of a prefill chunk, or one decode row)
// against kv head g, for the n_rep query heads that share it: every (row, head) pair walks the cache KW keys at a
// time. A step's keys are gathered across cache blocks and transposed once for all pairs, so each score vector is
// head_dim FMAs with no horizontal sums; the pairs are scored max_group at a time (each key vector loaded once for
// the group) and each keeps an online softmax (running max and sum, rescaled when the max grows).
//
// Keys are walked by their local index in this rank's cache (kv_shard_layout): every position under the plain
// layout, this rank's share of them under decode context parallelism. Each row sees the local indices of the
// positions in its window, [local_count(first), local_count(pos + 1)).
void attend_tile(const float* q, const int32_t* positions, const attention_seq& seq, int64_t r0, int64_t r1, int64_t g,
                 const paged_kv_view& cache, const kv_shard_layout& layout, int64_t n_head, int64_t n_rep, float scale,
                 int64_t window, float* out, float* lse, tile_scratch& s) {
  static constexpr auto scores_for = score_table(std::make_index_sequence<max_group>{});
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
  s.kt.resize(static_cast<size_t>(hd * KW));
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
  const bool f32_cache = cache.type == dtype::f32;
  // Keys are transposed straight from the cache where the transpose widens them; else copied to f32 first.
  const bool keys_in_place = f32_cache || transposes_any_type(hd);
  const dtype key_type = keys_in_place ? cache.type : dtype::f32;
  const size_t esize = dtype_size(cache.type);
  const size_t row_stride = static_cast<size_t>(cache.block_row_stride()) * esize;
  // A bf16 or f16 cache's values are read in place, widened as they load, where the tile's pairs are one group (a
  // decode row: each value vector is loaded once or twice) and every accumulation path can; a prefill tile's 32 pairs
  // would widen each vector 8 times, so there they are copied to f32 once first. bench_kernels, bf16 cache, batch-1
  // decode at 2048 positions: 0.152-0.155 ms copied, 0.141-0.143 in place.
  const bool values_in_place = f32_cache || (values_any_type(hd) && n_pairs <= max_group);
  const dtype value_type = values_in_place ? cache.type : dtype::f32;
  if (!keys_in_place)
    s.kf.resize(static_cast<size_t>(KW * hd));
  if (!values_in_place)
    s.vf.resize(static_cast<size_t>(KW * hd));
  const void* key_rows[KW];
  const void* value_rows[KW];
  const float* qp[max_group];
  alignas(64) float scores[max_group][KW];
  alignas(64) float pg[max_group][KW];  // the group's probabilities, zero for keys a pair does not see
  float corrections[max_group];
  float* accs[max_group];

  // Keys before the earliest window's first key are never touched (nor their blocks' table entries).
  for (int64_t key0 = ctx_first; key0 < ctx_end; key0 += KW) {
    const int64_t n = std::min<int64_t>(KW, ctx_end - key0);
    // The keys of a block at a time: one table entry and one row offset for each run of them.
    for (int64_t k = 0; k < n;) {
      const int64_t key = key0 + k, offset = key % bs, rows = std::min(bs - offset, n - k);
      const int32_t blk = seq.block_table[key / bs];
      ACTORLLM_CHECK(blk >= 0 && blk < cache.n_blocks, "paged_attention: block id out of range");
      const size_t at = static_cast<size_t>(cache.row_at(blk, offset, g)) * esize;
      const std::byte* k_at = static_cast<const std::byte*>(cache.k) + at;
      const std::byte* v_at = static_cast<const std::byte*>(cache.v) + at;
      for (int64_t r = 0; r < rows; ++r, ++k, k_at += row_stride, v_at += row_stride) {
        if (keys_in_place) {
          key_rows[k] = k_at;
        } else {
          widen_row(k_at, cache.type, hd, s.kf.data() + k * hd);
          key_rows[k] = s.kf.data() + k * hd;
        }
        if (values_in_place) {
          value_rows[k] = v_at;
        } else {
          widen_row(v_at, cache.type, hd, s.vf.data() + k * hd);
          value_rows[k] = s.vf.data() + k * hd;
        }
      }
    }
    // A decode row asks for the next step's rows a quarter at a time, between this step's parts (before and after the
    // transpose, before the softmax and before the values), so that the requests go out while the core computes
    // rather than in one burst that stalls it when the queues fill. A 2-vCPU Xeon (session 50), one decode row at
    // 4,096 positions, 2 threads, in one binary alternated 3 times: cold 330, 354 us against 366-388 at once, warm
    // 262-272 against 277-300; 1,024 cold 135-139 against 142-150; two steps ahead instead of one the same.
    const int64_t next0 = key0 + KW, n_next = n_rows == 1 ? std::clamp<int64_t>(ctx_end - next0, 0, KW) : 0;
    auto ask_ahead = [&](int quarter) {
      const int64_t b = quarter * KW / 4, e = std::min<int64_t>(n_next, (quarter + 1) * KW / 4);
      if (b < e)
        prefetch_rows(seq, cache, g, next0 + b, e - b);
    };
    ask_ahead(0);
    with_row_type(key_type, [&](auto d) { transpose_keys<d.value>(key_rows, n, hd, s.kt.data()); });
    ask_ahead(1);
    for (int64_t p0 = 0; p0 < n_pairs; p0 += max_group) {
      const int64_t np = std::min<int64_t>(max_group, n_pairs - p0);
      for (int64_t i = 0; i < np; ++i)
        qp[i] = s.q.data() + (p0 + i) * hd;
      // In calls of at most score_group pairs, split evenly (8 pairs: 4 and 4, each loading the keys once).
      for (int64_t i0 = 0, calls = (np + score_group - 1) / score_group; i0 < np; --calls) {
        const int64_t size = (np - i0 + calls - 1) / calls;
        scores_for[static_cast<size_t>(size - 1)](qp + i0, s.kt.data(), hd, scores + i0);
        i0 += size;
      }
      if (p0 == 0)
        ask_ahead(2);
      int64_t lo = KW, hi = 0;  // the keys any pair of the group sees
      for (int64_t i = 0; i < np; ++i) {
        const int64_t pair = p0 + i;
        const auto row = static_cast<size_t>(pair / n_rep);
        // The keys of this step that the pair's row sees: [see_lo, see_hi) of the step's lanes.
        const int64_t see_lo = std::max<int64_t>(s.key_lo[row] - key0, 0);
        const int64_t see_hi = std::min<int64_t>(s.key_hi[row] - key0, n);
        float* p = pg[i];
        accs[i] = s.acc.data() + pair * hd;
        corrections[i] = 1.0f;
        if (see_lo >= see_hi) {  // nothing here for this row: weight zero, its sums unchanged
          std::fill_n(p, KW, 0.0f);
          continue;
        }
        lo = std::min(lo, see_lo);
        hi = std::max(hi, see_hi);
        const bool masked = see_lo > 0 || see_hi < KW;  // the diagonal, a window's edge or a short step
        if (masked)
          for (int64_t k = 0; k < KW; ++k)
            if (k < see_lo || k >= see_hi)
              scores[i][k] = neg_inf;
        const simd::vf s0 = simd::load(scores[i]), s1 = simd::load(scores[i] + W);
        float& m = s.row_max[static_cast<size_t>(pair)];
        const float new_max = std::max(m, simd::reduce_max(simd::max(s0, s1)));
        // Rescale what was accumulated under the old max (exp(-inf) = 0 on the first step).
        const float correction = new_max == m ? 1.0f : simd::exp_scalar(m - new_max);
        m = new_max;
        const simd::vf mv = simd::set1(new_max);
        simd::store(p, simd::exp(simd::sub(s0, mv)));
        simd::store(p + W, simd::exp(simd::sub(s1, mv)));
        if (masked)
          for (int64_t k = 0; k < KW; ++k)
            if (k < see_lo || k >= see_hi)
              p[k] = 0.0f;
        float& l = s.row_sum[static_cast<size_t>(pair)];
        l = l * correction + simd::reduce_add(simd::add(simd::load(p), simd::load(p + W)));
        corrections[i] = correction;
      }
      if (p0 == 0)
        ask_ahead(3);
      if (lo >= hi)
        continue;
      with_row_type(value_type, [&](auto d) {
        accumulate_values_group_pairs<d.value>(accs, corrections, pg, np, lo, hi, value_rows, hd);
      });
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
  const size_t esize = dtype_size(cache.type);
  // Slot by slot a token's heads are one row; heads outer, a row of head_dim per kv head.
  const int64_t n_parts = cache.heads_outer ? cache.n_head_kv : 1, part = row / n_parts;
  for (int64_t t = 0; t < n_tokens; ++t) {
    int64_t slot = slot_mapping[t];
    if (slot < 0)
      continue;
    ACTORLLM_CHECK(slot < capacity, "write_kv: slot beyond the cache");
    for (int64_t g = 0; g < n_parts; ++g) {
      const size_t at = static_cast<size_t>(cache.row_of_slot(slot, g)) * esize;
      convert_from_f32(k + t * row + g * part, part, cache.type, static_cast<std::byte*>(cache.k) + at);
      convert_from_f32(v + t * row + g * part, part, cache.type, static_cast<std::byte*>(cache.v) + at);
    }
  }
}

namespace {

// decode_rope_write's part of one item: row r's heads of kv head g.
void rope_write_row_head(const decode_rope_write& p, const paged_kv_view& cache, int64_t n_head, int64_t r, int64_t g) {
  const int64_t hd = cache.head_dim, n_rep = n_head / cache.n_head_kv, row = cache.n_head_kv * hd;
  float* qh = p.q + (r * n_head + g * n_rep) * hd;
  float* kh = p.k + r * row + g * hd;
  if (p.q_norm != nullptr)
    rms_norm(qh, n_rep, hd, p.q_norm, p.q_norm_type, p.eps, qh);
  if (p.k_norm != nullptr)
    rms_norm(kh, 1, hd, p.k_norm, p.k_norm_type, p.eps, kh);
  const float* cs = p.cos + r * (hd / 2);
  const float* sn = p.sin + r * (hd / 2);
  rotate_heads(cs, sn, hd, qh, n_rep);
  rotate_heads(cs, sn, hd, kh, 1);
  const int64_t slot = p.slots[r];
  if (slot < 0)
    return;
  ACTORLLM_CHECK(slot < cache.n_blocks * cache.block_size, "write_kv: slot beyond the cache");
  const size_t at = static_cast<size_t>(cache.row_of_slot(slot, g)) * dtype_size(cache.type);
  convert_from_f32(kh, hd, cache.type, static_cast<std::byte*>(cache.k) + at);
  convert_from_f32(p.v + r * row + g * hd, hd, cache.type, static_cast<std::byte*>(cache.v) + at);
}

}  // namespace

void paged_attention(const float* q, const int32_t* positions, const attention_seq* seqs, int64_t n_seqs,
                     const paged_kv_view& cache, int64_t n_head, float scale, float* out, thread_pool& pool,
                     int64_t window, const kv_shard_layout& layout, float* lse, const decode_rope_write* rope_write) {
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
      if (rope_write != nullptr) {
        ACTORLLM_CHECK(seq.n_query == 1, "paged_attention: decode_rope_write needs one query row per sequence");
        rope_write_row_head(*rope_write, cache, n_head, r0, g);
      }
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
