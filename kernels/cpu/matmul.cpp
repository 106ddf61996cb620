// Matrix multiplication y = x w^T (+ bias) with f32/f16/bf16 weights.
//
// Two algorithms:
// - GEMV (few tokens): every weight row is streamed from memory exactly once and dotted with all token rows
//   while it sits in L1. A tile is 4 weight rows x up to 4 tokens of vector accumulators, reduced horizontally at
//   the end. bf16 rows are widened with a shift/AND pair that splits even and odd elements (no shuffles); the
//   token rows are permuted once per call to match. This path is memory-bandwidth bound by design.
// - GEMM (many tokens): the GotoBLAS scheme. A panel of NR = 2 vectors of outputs x KC inputs is converted to f32
//   and transposed into a contiguous buffer that stays in L1 while an MR x NR register tile of accumulators
//   walks every token row of the chunk, broadcasting one x value per FMA pair. The conversion cost is paid once
//   per panel and amortised over all token rows, so all weight types share one f32 micro-kernel. With AVX2, bf16
//   panels stay bf16 (pairs of inputs per output, widened in the tile by a shift or a mask): half the bytes to
//   write and read, and a transpose without widening; the products and their order are the same.
// Both split n_out over the pool, so each weight byte is read by one thread.
//
// An AVX2 build also reads bf16 weights the CPU backend packed at load (tensor_layout::cpu_bf16_panels, the pairs
// layout of the vdpbf16ps kernels): the GEMM's tiles read them where they lie, and decode (1-2 tokens) walks each
// panel front to back (panel_gemv; with the weights' owners in homes, taken over and read ahead as the vdpbf16ps
// decode reads its panels: panel_gemv_work). AVX-512 builds leave packed weights to matmul_bf16.cpp.
#include "kernels/cpu/matmul.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/compact_panels.hpp"
#include "kernels/cpu/home_streams.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "kernels/cpu/read_ahead.hpp"
#include "kernels/cpu/simd.hpp"
#include "util/check.hpp"

namespace actorllm::cpu {
namespace {

using simd::vf;
constexpr int W = simd::width;

template <dtype D>
using elem_t = std::conditional_t<D == dtype::f32, float, uint16_t>;

// One weight of a group that reads the same input (q, k and v kept apart, or gate and up): its rows' results go to
// y, n_out floats per token row.
struct fma_target {
  const void* w;
  int64_t n_out;
  const float* bias;
  float* y;
  bool packed = false;                // bf16 in tensor_layout::cpu_bf16_panels (AVX2 builds only: fma_bf16_panels)
  std::shared_ptr<const void> owner;  // keeps w alive (matmul_target::owner), or null
};

// Where target i's items begin in a group's single index space (items: GEMV row groups or GEMM panels), and which
// target an item belongs to. The targets run as one parallel call: one hand-out of work and one wait for the whole
// group, and the GEMM packs the token rows once for all of them.
struct group_items {
  std::array<int64_t, 9> begin{};  // begin[i]: target i's first item; begin[n]: the total
  size_t n = 0;

  group_items(std::span<const fma_target> targets, int64_t rows_per_item) : n(targets.size()) {
    for (size_t i = 0; i < n; ++i)
      begin[i + 1] = begin[i] + (targets[i].n_out + rows_per_item - 1) / rows_per_item;
  }
  int64_t total() const { return begin[n]; }
  // The target item `item` belongs to.
  size_t target_of(int64_t item) const {
    size_t i = 0;
    while (item >= begin[i + 1])
      ++i;
    return i;
  }
  // fn(target, first local item, end local item) for each target's part of items [b, e).
  template <class F>
  void for_each(int64_t b, int64_t e, F&& fn) const {
    for (size_t i = 0; i < n; ++i) {
      const int64_t lo = std::max(b, begin[i]), hi = std::min(e, begin[i + 1]);
      if (lo < hi)
        fn(i, lo - begin[i], hi - begin[i]);
    }
  }
};

// ---------------------------------------------------------------------------------------------------------------
// GEMV

constexpr int gemv_k_step = 2 * W;  // weight elements consumed per row per iteration
constexpr int gemv_rows = 4;
// Software prefetch distance along each weight row. The hardware prefetcher alone leaves ~5-7% of the bandwidth
// unused with four concurrent row streams per core (measured on an AVX-512 Xeon; 1-2 KiB ahead was worse).
// Prefetching past the end of a row touches the next row or, at the very end, at most 512 bytes past the matrix:
// a prefetch never faults.
constexpr size_t gemv_prefetch_bytes = 512;
#if defined(ACTORLLM_SIMD_AVX2)
constexpr int gemv_tokens = 2;  // 16 ymm registers only
#else
constexpr int gemv_tokens = 4;
#endif

// bf16 rows are loaded split by parity (simd::load_bf16_split), so the token rows must be laid out the same way
// within each block of gemv_k_step elements: W even-indexed elements, then W odd-indexed ones.
template <dtype D>
constexpr bool gemv_split = D == dtype::bf16;

// Two vectors' worth of weights, in the element order the prepared token rows use.
template <dtype D>
inline void gemv_load(const elem_t<D>* p, vf& a, vf& b) {
  if constexpr (D == dtype::f32) {
    a = simd::load(p);
    b = simd::load(p + W);
  } else if constexpr (D == dtype::f16) {
    a = simd::load_f16(p);
    b = simd::load_f16(p + W);
  } else {
    simd::load_bf16_split(p, a, b);
  }
}

// One block of gemv_k_step inputs, value(i) for i in [0, gemv_k_step), permuted for the split bf16 loads when `split`.
template <typename Value>
void gemv_put_block(float* dst, bool split, Value value) {
  for (int j = 0; j < W; ++j) {
    dst[j] = value(split ? 2 * j : j);
    dst[W + j] = value(split ? 2 * j + 1 : W + j);
  }
}

// Prepares the token rows for the GEMV tiles of weights whose rows start `lead` elements into a block (gemv_lead):
// each token's row in xp is k_pad floats, its inputs shifted right by `lead` zeros and zero-padded to main_pad (a
// multiple of gemv_k_step), then, with a lead, a head block (the first gemv_k_step - lead inputs, zeros after) and a
// tail block (zeros, then the last `lead` inputs), which multiply the row's first and last gemv_k_step elements as
// they lie.
void gemv_prepare_x(const float* x, int64_t n_tokens, int64_t n_in, bool split, int64_t lead, float* xp,
                    int64_t main_pad, int64_t k_pad) {
  constexpr int64_t ks = gemv_k_step;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* src = x + t * n_in;
    float* dst = xp + t * k_pad;
    for (int64_t k0 = 0; k0 < main_pad; k0 += ks)
      gemv_put_block(dst + k0, split, [&](int64_t i) {
        const int64_t k = k0 + i - lead;
        return k >= 0 && k < n_in ? src[k] : 0.0f;
      });
    gemv_put_block(dst + main_pad, split, [&](int64_t i) { return lead > 0 && i < ks - lead ? src[i] : 0.0f; });
    gemv_put_block(dst + main_pad + ks, split,
                   [&](int64_t i) { return lead > 0 && i >= ks - lead ? src[n_in - ks + i] : 0.0f; });
  }
}

// Where a weight's rows start within a block of gemv_k_step elements, so that the GEMV can read them in blocks aligned
// to their size (gemv_tile: no load that straddles two cache lines). 0 where the rows do not all share one offset (a
// row's bytes not a whole number of blocks). A checkpoint's tensors sit where its header puts them: the safetensors
// format pads the header to 8 bytes only, so a weight read in place from the file is most often 8-56 bytes into a cache
// line, and every second 32-byte load of its rows then crossed a line: 2-vCPU Zen 3 VM (AVX2), bf16 2048 -> 5632 batch
// 1, 24 matrices far beyond the caches, 25 alternations in one process: rows at 56 or 8 bytes into a line read 5.5%
// slower than aligned ones (32 bytes: as fast).
template <dtype D>
int64_t gemv_lead(const void* w, int64_t n_in) {
  constexpr size_t block_bytes = gemv_k_step * sizeof(elem_t<D>);
  const auto addr = reinterpret_cast<uintptr_t>(w);
  if (n_in <= 0 || (static_cast<size_t>(n_in) * sizeof(elem_t<D>)) % block_bytes != 0 || addr % sizeof(elem_t<D>) != 0)
    return 0;
  return static_cast<int64_t>((addr % block_bytes) / sizeof(elem_t<D>));
}

struct gemv_args {
  const void* w;
  int64_t n_in;
  int64_t n_out;
  const float* xp;  // prepared token rows (gemv_prepare_x), k_pad floats each
  int64_t k_pad;    // main_pad (gemv_prepare_x), then the head and the tail block
  int64_t lead;     // gemv_lead of w
  const float* bias;
  float* y;
};

// y[t0 .. t0+TT) x rows row0, row0 + stride, ... (R of them) for one tile.
template <dtype D, int R, int TT>
void gemv_tile(const gemv_args& a, int64_t row0, int64_t t0, int64_t stride) {
  using T = elem_t<D>;
  const T* rows[R];
  for (int r = 0; r < R; ++r)
    rows[r] = static_cast<const T*>(a.w) + (row0 + r * stride) * a.n_in;
  const float* xs = a.xp + t0 * a.k_pad;

  vf acc[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t)
      acc[r][t] = simd::zero();

  auto step = [&](const T* const* src, int64_t k_w, int64_t k_x) {
    vf wa[R], wb[R];
#if defined(ACTORLLM_SIMD_AVX512) || defined(ACTORLLM_SIMD_AVX2)
    if (src == rows) {
      for (int r = 0; r < R; ++r)
        for (size_t line = 0; line < gemv_k_step * sizeof(T); line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(src[r] + k_w) + gemv_prefetch_bytes + line, _MM_HINT_T0);
    }
#endif
    for (int r = 0; r < R; ++r)
      gemv_load<D>(src[r] + k_w, wa[r], wb[r]);
    for (int t = 0; t < TT; ++t) {
      vf xa = simd::load(xs + t * a.k_pad + k_x);
      vf xb = simd::load(xs + t * a.k_pad + k_x + W);
      for (int r = 0; r < R; ++r) {
        acc[r][t] = simd::fmadd(wa[r], xa, acc[r][t]);
        acc[r][t] = simd::fmadd(wb[r], xb, acc[r][t]);
      }
    }
  };

  // With a lead the rows are a whole number of blocks (gemv_lead) and are read in blocks that begin `lead` elements
  // before a block boundary of the row's bytes, against the inputs shifted by as much: the row's elements
  // [ks - lead, n_in - lead). Its first and last gemv_k_step elements are read as they lie, against the head and tail
  // blocks of the inputs, which are zero where the aligned blocks already cover them: every load stays inside the
  // row, and no copy of the weights is made (a copy read back at once stalled on store forwarding: 0.80-0.90 of the
  // aligned speed). The elements read twice meet a zero input once: a weight of ±Inf there gives NaN, not ±Inf.
  const int64_t lead = a.lead;
  if (lead > 0) {
    constexpr int64_t ks = gemv_k_step;
    const int64_t head_x = a.k_pad - 2 * ks;
    step(rows, 0, head_x);
    for (int64_t k = ks; k < a.n_in; k += ks)
      step(rows, k - lead, k);
    step(rows, a.n_in - ks, head_x + ks);
  } else {
    const int64_t k_main = a.n_in / gemv_k_step * gemv_k_step;
    for (int64_t k = 0; k < k_main; k += gemv_k_step)
      step(rows, k, k);
    if (k_main < a.n_in) {
      // The row tail goes through a zero-padded copy so the loads never run past the weight buffer.
      T tail[R][gemv_k_step] = {};
      const T* tails[R];
      for (int r = 0; r < R; ++r) {
        std::memcpy(tail[r], rows[r] + k_main, static_cast<size_t>(a.n_in - k_main) * sizeof(T));
        tails[r] = tail[r];
      }
      step(tails, 0, k_main);
    }
  }

  for (int t = 0; t < TT; ++t) {
    float* out = a.y + (t0 + t) * a.n_out + row0;
    for (int r = 0; r < R; ++r)
      out[r * stride] = simd::reduce_add(acc[r][t]) + (a.bias != nullptr ? a.bias[row0 + r * stride] : 0.0f);
  }
}

using gemv_tile_fn = void (*)(const gemv_args&, int64_t, int64_t, int64_t);

template <dtype D, size_t... I>
constexpr std::array<gemv_tile_fn, sizeof...(I)> gemv_table(std::index_sequence<I...>) {
  return {&gemv_tile<D, static_cast<int>(I / gemv_tokens) + 1, static_cast<int>(I % gemv_tokens) + 1>...};
}

template <dtype D>
void gemv(const float* x, int64_t n_tokens, int64_t n_in, std::span<const fma_target> targets, thread_pool& pool) {
  static constexpr auto table = gemv_table<D>(std::make_index_sequence<gemv_rows * gemv_tokens>{});
  // The token rows prepared once for each lead among the targets (q, k and v read in place have one each).
  // (With a lead, n_in is a whole number of blocks and the shifted inputs the tile reads end at n_in.)
  const int64_t main_pad = (n_in + gemv_k_step - 1) / gemv_k_step * gemv_k_step;
  const int64_t k_pad = main_pad + 2 * gemv_k_step;  // + the head and tail blocks
  thread_local std::vector<float> xp_storage;
  std::array<int64_t, 8> leads{};
  std::array<size_t, 8> copy_of{};  // each target's prepared copy
  size_t n_leads = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const int64_t lead = gemv_lead<D>(targets[i].w, n_in);
    size_t c = 0;
    while (c < n_leads && leads[c] != lead)
      ++c;
    if (c == n_leads)
      leads[n_leads++] = lead;
    copy_of[i] = c;
  }
  const auto copy_size = static_cast<size_t>(n_tokens * k_pad);
  xp_storage.resize(n_leads * copy_size);
  for (size_t c = 0; c < n_leads; ++c)
    gemv_prepare_x(x, n_tokens, n_in, gemv_split<D>, leads[c], xp_storage.data() + c * copy_size, main_pad, k_pad);
  std::array<gemv_args, 8> args;
  for (size_t i = 0; i < targets.size(); ++i)
    args[i] = gemv_args{targets[i].w,
                        n_in,
                        targets[i].n_out,
                        xp_storage.data() + copy_of[i] * copy_size,
                        k_pad,
                        leads[copy_of[i]],
                        targets[i].bias,
                        targets[i].y};
  const group_items items(targets, gemv_rows);

  auto tiles = [&](const gemv_args& a, int64_t row0, int rows, int64_t stride) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += gemv_tokens) {
      int tt = static_cast<int>(std::min<int64_t>(gemv_tokens, n_tokens - t0));
      table[static_cast<size_t>((rows - 1) * gemv_tokens + (tt - 1))](a, row0, t0, stride);
    }
  };
  pool.parallel_for(items.total(), [&](int64_t i_begin, int64_t i_end) {
    items.for_each(i_begin, i_end, [&](size_t t, int64_t g_begin, int64_t g_end) {
      // A tile's rows come one from each quarter of the chunk, so that each of the gemv_rows streams runs on through
      // its quarter's consecutive rows (rows are contiguous) instead of stopping after one row, n_in elements, and
      // jumping gemv_rows rows on: four long streams for the hardware prefetcher where it had bursts of 4 KiB at
      // 2048 inputs. 2-vCPU Zen 3 VM (AVX2), bf16 batch 1, weights cold, 6 alternations (medians): 2048 -> 5632
      // 19.2 -> 22.3 GB/s, 5632 -> 2048 19.1 -> 22.3, 2048 -> 32000 16.7 -> 22.6. Each row's sum is unchanged.
      const gemv_args& a = args[t];
      int64_t r_begin = g_begin * gemv_rows, r_end = std::min(a.n_out, g_end * gemv_rows);
      int64_t quarter = (r_end - r_begin) / gemv_rows;
      for (int64_t i = 0; i < quarter; ++i)
        tiles(a, r_begin + i, gemv_rows, quarter);
      for (int64_t row0 = r_begin + quarter * gemv_rows; row0 < r_end; row0 += gemv_rows)
        tiles(a, row0, static_cast<int>(std::min<int64_t>(gemv_rows, r_end - row0)), 1);
    });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// bf16 weights packed at load (AVX2)
//
// The CPU backend packs bf16 Linear weights into tensor_layout::cpu_bf16_panels when it loads them
// (bf16_panels_preferred): panels of 32 outputs, each [k_pad / 2][32] 32-bit words that hold an output's weights at
// inputs k (low half) and k + 1 (high half): the layout of the vdpbf16ps kernels, and the pairs gemm_pack_b16 makes per
// call. So on AVX2 the GEMM's tiles read 16 outputs of a panel where it lies (the packing per call was 12% of a
// batch-32 step's GEMM samples), and the decode reads each panel once, front to back, as one sequential stream: 128
// bytes per pair of inputs, widened by the same shift and mask, multiplied in the same order (the sums of n_in <=
// gemm_kc inputs equal the GEMM's).

#if defined(ACTORLLM_SIMD_AVX2)
constexpr bool fma_bf16_panels = true;
#else
constexpr bool fma_bf16_panels = false;  // the AVX-512 builds read packed weights on vdpbf16ps (matmul_bf16.cpp)
#endif

#if defined(ACTORLLM_SIMD_AVX2)
// 8 outputs' bf16 pairs (32-bit words: input k in the low half, k + 1 in the high) at p, as f32: input k by a shift,
// input k + 1 by masking the low half off (pair_high_mask()). Each loads p itself, so that a tile short of registers
// reads the pairs from L1 twice rather than keeping them.
inline vf pair_low(const float* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(_mm256_loadu_ps(p)), 16));
}
inline vf pair_high_mask() { return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0xffff0000u))); }
inline vf pair_high(const float* p, vf high_mask) { return _mm256_and_ps(_mm256_loadu_ps(p), high_mask); }

constexpr int64_t loaded_panel_rows = 32;
int64_t loaded_panel_k_pad(int64_t n_in) { return (n_in + 31) / 32 * 32; }
// The token rows as the panel walk reads them: each n_in floats of x zero-padded to loaded_panel_k_pad(n_in), in out.
void pad_token_rows(const float* x, int64_t n_tokens, int64_t n_in, std::vector<float>& out) {
  const int64_t k_pad = loaded_panel_k_pad(n_in);
  out.assign(static_cast<size_t>(n_tokens * k_pad), 0.0f);
  for (int64_t t = 0; t < n_tokens; ++t)
    std::memcpy(out.data() + t * k_pad, x + t * n_in, static_cast<size_t>(n_in) * sizeof(float));
}
// 32-bit words of one panel.
int64_t loaded_panel_words(int64_t n_in) { return loaded_panel_k_pad(n_in) / 2 * loaded_panel_rows; }

// The pairs of outputs [o0, o0 + 16) at inputs k0 and k0 + 1, the next pair loaded_panel_rows words on (o0 a multiple
// of 16, k0 even).
const float* loaded_panel_pairs(const void* w, int64_t n_in, int64_t o0, int64_t k0) {
  return static_cast<const float*>(w) + o0 / loaded_panel_rows * loaded_panel_words(n_in) + k0 / 2 * loaded_panel_rows +
         o0 % loaded_panel_rows;
}

// How far ahead of its loads the first GEMM tile over a panel of a weight packed at load asks for its lines.
constexpr int64_t gemm_stream_prefetch_bytes = 1024;

constexpr int panel_gemv_tokens = 2;  // token rows per walk over a panel
// Panels walked side by side at one token (one at two: 8 accumulators per panel and token, 16 ymm registers).
constexpr int panel_gemv_streams = 2;
constexpr int64_t panel_gemv_prefetch_bytes = 512;

struct panel_gemv_tile {
  const float* w;     // the panel's first pair row
  float* y;           // the first token's output o0
  int n_valid;        // outputs of the panel that exist
  const float* bias;  // at o0, or null
};

// S panels x T token rows, side by side over all n_pairs pair rows. xp: the token rows, x_ld floats apart and
// zero-padded to 2 n_pairs; y rows ldy apart.
template <int T, int S>
void panel_gemv_walk(const panel_gemv_tile* tiles, const float* xp, int64_t x_ld, int64_t n_pairs, int64_t ldy) {
  constexpr int Q = loaded_panel_rows / W;  // vectors per pair row
  vf acc[S][Q][T];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)
        acc[s][q][t] = simd::zero();
  const float* p[S];
  for (int s = 0; s < S; ++s)
    p[s] = tiles[s].w;
  const vf high_mask = pair_high_mask();
  // The loops inside are unrolled by hand's order (pragmas): left to itself GCC 12 kept the q loop and with it the
  // accumulators on the stack, every FMA's sum stored and loaded back.
  for (int64_t kp = 0; kp < n_pairs; ++kp) {
    vf x0[T], x1[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      x0[t] = _mm256_broadcast_ss(xp + t * x_ld + 2 * kp);
      x1[t] = _mm256_broadcast_ss(xp + t * x_ld + 2 * kp + 1);
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      _mm_prefetch(reinterpret_cast<const char*>(p[s]) + panel_gemv_prefetch_bytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p[s]) + panel_gemv_prefetch_bytes + 64, _MM_HINT_T0);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        const vf lo = pair_low(p[s] + q * W);
        const vf hi = pair_high(p[s] + q * W, high_mask);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          acc[s][q][t] = simd::fmadd(lo, x0[t], acc[s][q][t]);
          acc[s][q][t] = simd::fmadd(hi, x1[t], acc[s][q][t]);
        }
      }
      p[s] += loaded_panel_rows;
    }
  }
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      alignas(32) float sums[loaded_panel_rows];
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q)
        simd::store(sums + q * W, acc[s][q][t]);
      float* out = tiles[s].y + t * ldy;
      for (int j = 0; j < tiles[s].n_valid; ++j)
        out[j] = sums[j] + (tiles[s].bias != nullptr ? tiles[s].bias[j] : 0.0f);
    }
}

using panel_gemv_fn = void (*)(const panel_gemv_tile*, const float*, int64_t, int64_t, int64_t);

// Entry (T - 1) * panel_gemv_streams + (S - 1): T tokens, S panels side by side (two tokens walk one panel at a time).
template <size_t I>
constexpr int walk_tokens = static_cast<int>(I / panel_gemv_streams) + 1;
template <size_t I>
constexpr int walk_streams = walk_tokens<I> == 1 ? static_cast<int>(I % panel_gemv_streams) + 1 : 1;
template <size_t... I>
constexpr std::array<panel_gemv_fn, sizeof...(I)> panel_gemv_table(std::index_sequence<I...>) {
  return {&panel_gemv_walk<walk_tokens<I>, walk_streams<I>>...};
}

// Walks `count` panels (1 to panel_gemv_streams, side by side; one at two tokens) of `tokens` token rows.
void walk_panels(const panel_gemv_tile* tiles, int tokens, int count, const float* xp, int64_t k_pad, int64_t ldy) {
  static constexpr auto table = panel_gemv_table(std::make_index_sequence<panel_gemv_tokens * panel_gemv_streams>{});
  table[static_cast<size_t>((tokens - 1) * panel_gemv_streams + (count - 1))](tiles, xp, k_pad, k_pad / 2, ldy);
}

// Decode (1 or 2 tokens) over packed targets whose weights have owners, read as the vdpbf16ps kernels read theirs
// (matmul_bf16.cpp, streamed_panel_work): each pool thread walks its home's panels as runs that go on from one grain to
// the next (home_streams: panel_gemv_streams runs at one token, one at two), a thread done with its home takes the
// back half of another's rest, a grain held by a thread the OS descheduled is taken over
// (thread_pool::parallel_for_takeover), and a thread waiting for the next call reads the start of its home in that call
// ahead (read_ahead). The sums go to the computing thread's scratch, then with the bias to the outputs, in the same
// walk and order as panel_gemv: the same bits. Before, a plain parallel_for left the other thread waiting at the end of
// every call and between calls (8.7% of a batch-1 step on the Zen 4 VM in an AVX2 build), and held each call up for a
// time slice where the machine was shared.
class panel_gemv_work final : public takeover_work {
 public:
  panel_gemv_work(const float* x, int64_t n_tokens, int64_t n_in, std::span<const fma_target> targets, int n_homes)
      : n_tokens_(n_tokens), n_in_(n_in), k_pad_(loaded_panel_k_pad(n_in)), units_(targets, loaded_panel_rows) {
    std::copy(targets.begin(), targets.end(), targets_.begin());
    pad_token_rows(x, n_tokens, n_in, xp_);
    homes_ = home_streams::shared(units_.total(), n_homes, streams());
  }

  int64_t n_units() const { return units_.total(); }
  /// Panels read side by side: panel_gemv_streams at one token, one at two.
  int streams() const { return n_tokens_ == 1 ? panel_gemv_streams : 1; }
  /// Bytes of one panel.
  int64_t unit_bytes() const { return loaded_panel_words(n_in_) * static_cast<int64_t>(sizeof(float)); }
  /// Items a grain of home_split: four steps (as the vdpbf16ps kernels' homes), the last two grains' worth one step.
  int64_t home_grain() const { return 4 * streams(); }
  int64_t home_tail_grain() const { return streams(); }

  size_t scratch_floats(int64_t n_items) const override {
    return static_cast<size_t>(n_items * n_tokens_ * loaded_panel_rows);
  }

  void compute(int64_t begin, int64_t end, float* scratch) const noexcept override {
    panel_gemv_tile group[panel_gemv_streams];
    int count = 0;
    for (int64_t item = begin; item < end; ++item) {
      // The walk writes all 32 sums of a panel (its rows past n_out are zeros) and no bias, to the item's scratch.
      group[count++] = panel_gemv_tile{panel_of(homes_->unit_of(item)), scratch + scratch_offset(item - begin),
                                       static_cast<int>(loaded_panel_rows), nullptr};
      if (item + 1 == end || homes_->starts_step(item + 1)) {
        walk_panels(group, static_cast<int>(n_tokens_), count, xp_.data(), k_pad_, loaded_panel_rows);
        count = 0;
      }
    }
  }

  void commit(int64_t begin, int64_t end, const float* scratch) const noexcept override {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t u = homes_->unit_of(item);
      const size_t i = units_.target_of(u);
      const fma_target& target = targets_[i];
      const int64_t o0 = (u - units_.begin[i]) * loaded_panel_rows;
      const int64_t n_valid = std::min<int64_t>(loaded_panel_rows, target.n_out - o0);
      const float* sums = scratch + scratch_offset(item - begin);
      for (int64_t t = 0; t < n_tokens_; ++t) {
        float* out = target.y + t * target.n_out + o0;
        const float* row = sums + t * loaded_panel_rows;
        for (int64_t j = 0; j < n_valid; ++j)  // as panel_gemv_walk adds the bias
          out[j] = row[j] + (target.bias != nullptr ? target.bias[o0 + j] : 0.0f);
      }
    }
  }

  void idle(int thread_index, const std::function<bool()>& stop) const noexcept override {
    if (next_ != nullptr)
      read_ahead(*next_, thread_index, stop);
  }

  /// What this call's threads read first, for the call before it to read ahead: the start of each run of each home,
  /// read_ahead_budget in all a thread (or each run's first read_ahead_plan::max_tiles panels), guarded by the
  /// weights' owners.
  read_ahead_plan first_reads() const {
    read_ahead_plan plan = home_first_reads(*homes_, static_cast<size_t>(unit_bytes()),
                                            read_ahead_budget(cache_sizes::of_this_machine(), homes_->n_homes()),
                                            [this](int64_t u) { return static_cast<const void*>(panel_of(u)); });
    for (size_t i = 0; i < units_.n; ++i)
      plan.owners.emplace_back(targets_[i].owner);
    return plan;
  }

  /// The call that came after this one last time.
  void set_next(std::shared_ptr<const read_ahead_plan> next) { next_ = std::move(next); }

 private:
  const float* panel_of(int64_t u) const {
    const size_t i = units_.target_of(u);
    return loaded_panel_pairs(targets_[i].w, n_in_, (u - units_.begin[i]) * loaded_panel_rows, 0);
  }
  // Where the sums of a grain's item-th panel start in its scratch (n_tokens rows of 32).
  int64_t scratch_offset(int64_t item) const { return item * n_tokens_ * loaded_panel_rows; }

  int64_t n_tokens_, n_in_, k_pad_;
  group_items units_;
  std::array<fma_target, 8> targets_{};  // their owners keep the weights alive
  std::vector<float> xp_;
  std::shared_ptr<const home_streams> homes_;
  std::shared_ptr<const read_ahead_plan> next_;
};

// panel_gemv_work over the pool, its next call's start read ahead while threads wait.
void panel_gemv_takeover(const float* x, int64_t n_tokens, int64_t n_in, std::span<const fma_target> targets,
                         thread_pool& pool) {
  auto work = std::make_shared<panel_gemv_work>(x, n_tokens, n_in, targets, pool.size());
  const int64_t n_units = work->n_units();
  const read_ahead_key key{targets.front().w, n_units, work->unit_bytes(), work->streams(), pool.size()};
  work->set_next(next_call_table::global().advance(key, [&] { return work->first_reads(); }));
  takeover_split split = pool.home_split(n_units, work->home_grain(), work->home_tail_grain());
  pool.parallel_for_takeover(std::move(split), std::move(work));
}

// The GEMV over targets packed at load: with owners and 1 or 2 tokens panel_gemv_takeover; else each pool chunk's
// panels of a target as panel_gemv_streams runs of near-equal length walked side by side (at one token), every pair
// of token rows walking them again (from the caches).
void panel_gemv(const float* x, int64_t n_tokens, int64_t n_in, std::span<const fma_target> targets,
                thread_pool& pool) {
  const bool owned =
      std::all_of(targets.begin(), targets.end(), [](const fma_target& t) { return t.owner != nullptr; });
  if (owned && n_tokens <= panel_gemv_tokens) {
    panel_gemv_takeover(x, n_tokens, n_in, targets, pool);
    return;
  }
  const int64_t k_pad = loaded_panel_k_pad(n_in);
  thread_local std::vector<float> xp_storage;
  pad_token_rows(x, n_tokens, n_in, xp_storage);
  const float* xp = xp_storage.data();
  const group_items items(targets, loaded_panel_rows);
  pool.parallel_for(items.total(), [&](int64_t i_begin, int64_t i_end) {
    items.for_each(i_begin, i_end, [&](size_t i, int64_t p_begin, int64_t p_end) {
      const fma_target& target = targets[i];
      auto tile_of = [&](int64_t p, int64_t t0) {
        const int64_t o0 = p * loaded_panel_rows;
        return panel_gemv_tile{loaded_panel_pairs(target.w, n_in, o0, 0), target.y + t0 * target.n_out + o0,
                               static_cast<int>(std::min<int64_t>(loaded_panel_rows, target.n_out - o0)),
                               target.bias != nullptr ? target.bias + o0 : nullptr};
      };
      for (int64_t t0 = 0; t0 < n_tokens; t0 += panel_gemv_tokens) {
        const int tt = static_cast<int>(std::min<int64_t>(panel_gemv_tokens, n_tokens - t0));
        const int64_t n = p_end - p_begin;
        const int64_t streams = std::min<int64_t>(tt == 1 ? panel_gemv_streams : 1, n);
        const int64_t longest = (n + streams - 1) / streams;
        for (int64_t j = 0; j < longest; ++j) {
          panel_gemv_tile group[panel_gemv_streams];
          int count = 0;
          for (int64_t s = 0; s < streams; ++s) {
            const int64_t begin = p_begin + n * s / streams, end = p_begin + n * (s + 1) / streams;
            if (begin + j < end)
              group[count++] = tile_of(begin + j, t0);
          }
          walk_panels(group, tt, count, xp + t0 * k_pad, k_pad, target.n_out);
        }
      }
    });
  });
}
#endif

// ---------------------------------------------------------------------------------------------------------------
// GEMM

constexpr int gemm_nr = 2 * W;  // outputs per panel / register tile
#if defined(ACTORLLM_SIMD_AVX512)
constexpr int gemm_mr = 12;  // token rows per register tile: 24 zmm accumulators + 2 weight vectors
#elif defined(ACTORLLM_SIMD_AVX2)
constexpr int gemm_mr = 6;               // 12 ymm accumulators + 2 weight vectors + 1 broadcast
#else
constexpr int gemm_mr = 4;
#endif
#if defined(ACTORLLM_SIMD_AVX2)
// A whole row of inputs per panel for most shapes (2048 x 16 f32 = 128 KiB, in L2): each K block reads and writes the
// output tile again, and with blocks of 256 those accesses (rows n_out floats apart, a TLB miss each) were a sixth of
// the time. 2-vCPU Zen 3 VM (32 KiB L1, 512 KiB L2), 512 x 2048 -> 8192 bf16, alternated builds: 256 / 512 rows and
// inputs 93-97 GFLOP/s, 512 / 2048 119-132, 256 / 2048 125-129, 256 / 8192 117-127; 512 x 5632 -> 2048 at 256 / 2048
// 109-114 (the FMA peak of the VM's two cores together: 183 GFLOP/s).
constexpr int64_t gemm_kc = 2048;
constexpr int64_t gemm_tc = 256;  // token rows per chunk, packed by gemm_pack_x (2 MiB at 2048 inputs)
#else
constexpr int64_t gemm_kc = 256;         // packed panel: gemm_kc x gemm_nr f32 = 32 KiB with AVX-512, fits L1
constexpr int64_t gemm_tc = 512;         // token rows per chunk: the x block (gemm_tc x gemm_kc f32) stays in L2
#endif

// Packs w[o0 .. o0+NR, k0 .. k0+kc) as f32 into buf[kc][NR]; rows at or past n_out become zeros.
template <dtype D>
void gemm_pack(const void* w, int64_t n_in, int64_t n_out, int64_t o0, int64_t k0, int64_t kc, float* buf) {
  using T = elem_t<D>;
  const T* base = static_cast<const T*>(w);
#if defined(ACTORLLM_SIMD_AVX512) || defined(ACTORLLM_SIMD_AVX2)
  // W x W blocks transposed in registers (the scalar loop below is several times slower, and with few tokens per
  // call, as in batched decode, packing is a large share of the GEMM).
  for (int h = 0; h < gemm_nr / W; ++h) {
    int64_t r0 = o0 + h * W;
    int valid = static_cast<int>(std::clamp<int64_t>(n_out - r0, 0, W));
    int64_t k = 0;
    for (; k + W <= kc; k += W) {
      vf r[W];
      for (int i = 0; i < W; ++i)
        r[i] = i < valid ? simd::load_as<D>(base + (r0 + i) * n_in + k0 + k, 0) : simd::zero();
      simd::transpose(r);
      for (int i = 0; i < W; ++i)
        simd::store(buf + (k + i) * gemm_nr + h * W, r[i]);
    }
    if (k < kc) {
      alignas(64) float tmp[W][W] = {};
      for (int i = 0; i < valid; ++i)
        for (int64_t j = k; j < kc; ++j)
          tmp[i][j - k] = load_as_f32(base, D, static_cast<size_t>((r0 + i) * n_in + k0 + j));
      vf r[W];
      for (int i = 0; i < W; ++i)
        r[i] = simd::load(tmp[i]);
      simd::transpose(r);
      for (int64_t j = k; j < kc; ++j)
        simd::store(buf + j * gemm_nr + h * W, r[j - k]);
    }
  }
#else
  for (int64_t k = 0; k < kc; ++k)
    for (int r = 0; r < gemm_nr; ++r)
      buf[k * gemm_nr + r] =
          o0 + r < n_out ? load_as_f32(base, D, static_cast<size_t>((o0 + r) * n_in + k0 + k)) : 0.0f;
#endif
}

// Packs token rows [m0, m0 + mm) of x, columns [k0, k0 + kc), as [kc][gemm_mr] (rows past mm zero): the register
// tile then broadcasts its inputs from one sequential stream. Read in place, its gemm_mr rows lie n_in floats apart
// (8 KiB at 2048 inputs: all in one L1 set) and its loads walk gemm_mr streams; packed once per K block and thread,
// they are shared by every panel of the thread. 2-vCPU Zen 3 VM (AVX2), 512 x 2048 -> 8192 bf16, alternated builds:
// 71-78 GFLOP/s before (with the scalar weight packing), 87-92 with both packings in registers and x packed.
//
// W columns at a time in registers (W rows loaded, those past mm zero, transposed): each column's gemm_mr values are
// stored as a whole vector of W, whose last W - gemm_mr lanes the next column's store overwrites, and past the last
// column they land in the W floats of slack the caller leaves after `out`. The scalar loop was about half of the
// GEMM's time outside its tiles at 512 tokens (perf, 512 x 2048 -> 5632 bf16 on the Zen 3 VM: 8.0% of the samples
// outside the tiles before, 4.5% after).
void gemm_pack_x(const float* x, int64_t n_in, int64_t m0, int mm, int64_t k0, int64_t kc, float* out) {
  int64_t k = 0;
#if defined(ACTORLLM_SIMD_AVX512) || defined(ACTORLLM_SIMD_AVX2)
  static_assert(gemm_mr <= W);
  for (; k + W <= kc; k += W) {
    vf r[W];
    for (int m = 0; m < W; ++m)
      r[m] = m < mm ? simd::load(x + (m0 + m) * n_in + k0 + k) : simd::zero();
    simd::transpose(r);
    for (int j = 0; j < W; ++j)
      simd::store(out + (k + j) * gemm_mr, r[j]);
  }
#endif
  for (; k < kc; ++k)
    for (int m = 0; m < gemm_mr; ++m)
      out[k * gemm_mr + m] = m < mm ? x[(m0 + m) * n_in + k0 + k] : 0.0f;
}

#if defined(ACTORLLM_SIMD_AVX2)
// bf16 panels for AVX2: w[o0 .. o0+16, k0 .. k0+kc) kept as bf16 in two halves of 8 outputs, buf[h][ceil(kc/2)][8]
// pairs: 32 bits per output holding its weights at inputs k (low half) and k+1 (high half), 32 bytes per pair of
// inputs. Shifting a vector of them left by 16 gives the half's 8 outputs at k as f32; masking the low halves off gives
// them at k+1 (gemm_tile_b16). A half is the 8 x 8 transpose of 32-bit lanes of its 8 rows, no widening; rows at or
// past n_out become zeros, and so does input kc of an odd kc.
int64_t gemm_b16_half(int64_t kc) { return (kc + 1) / 2 * 16; }  // uint16 values of one half
void gemm_pack_b16(const uint16_t* base, int64_t n_in, int64_t n_out, int64_t o0, int64_t k0, int64_t kc,
                   uint16_t* buf) {
  static_assert(gemm_nr == 2 * W);
  for (int h = 0; h < 2; ++h) {
    const uint16_t* rows[W];
    for (int i = 0; i < W; ++i) {
      const int64_t o = o0 + W * h + i;
      rows[i] = o < n_out ? base + o * n_in + k0 : nullptr;
    }
    simd::transpose_bf16_pairs8(rows, kc, (kc + 1) / 2 * 2, reinterpret_cast<uint32_t*>(buf + h * gemm_b16_half(kc)),
                                W);
  }
}
#endif

struct gemm_tile_args {
  const float* xp;  // the tile's token rows, packed by gemm_pack_x
  const void* wp;   // packed panel: f32 (gemm_pack) or, in gemm_tile_b16, bf16 pairs of its first half of outputs
  int64_t kc;
  // gemm_tile_b16 only: floats (32-bit pairs) from one pair of inputs to the next, and from the first half's pairs to
  // the second's: W and gemm_b16_half(kc) / 2 in a panel gemm_pack_b16 wrote, 32 and W in a weight packed at load.
  int64_t pair_stride;
  int64_t second_half;
  float* y;  // token row 0 of the tile, column o0
  int64_t ldy;
  int n_valid;        // outputs of the panel that exist (< gemm_nr only in the last panel)
  bool accumulate;    // add to y (a later K block) instead of overwriting it
  const float* bias;  // gemm_nr values (padded) added on the first K block, or null
};

// The tile's sums into y: bias on the first K block, added to y on later ones, only the panel's valid outputs.
template <int M>
[[gnu::always_inline]] inline void gemm_tile_store(const gemm_tile_args& a, vf* acc0, vf* acc1) {
  for (int m = 0; m < M; ++m) {
    float* out = a.y + m * a.ldy;
    if (a.bias != nullptr) {
      acc0[m] = simd::add(acc0[m], simd::load(a.bias));
      acc1[m] = simd::add(acc1[m], simd::load(a.bias + W));
    }
    if (a.n_valid == gemm_nr) {
      if (a.accumulate) {
        acc0[m] = simd::add(acc0[m], simd::load(out));
        acc1[m] = simd::add(acc1[m], simd::load(out + W));
      }
      simd::store(out, acc0[m]);
      simd::store(out + W, acc1[m]);
    } else {
      alignas(64) float tmp[gemm_nr];
      simd::store(tmp, acc0[m]);
      simd::store(tmp + W, acc1[m]);
      for (int j = 0; j < a.n_valid; ++j)
        out[j] = a.accumulate ? out[j] + tmp[j] : tmp[j];
    }
  }
}

template <int M>
void gemm_tile(const gemm_tile_args& a) {
  vf acc0[M], acc1[M];
  for (int m = 0; m < M; ++m) {
    acc0[m] = simd::zero();
    acc1[m] = simd::zero();
  }
  // The counter runs from -kc up to zero against the rows' ends, so that the rows' pointers, the panel's and the
  // counter fit the general registers (as in matmul_bf16.cpp's tile: with `k < kc` GCC 12 kept the bound and a row
  // pointer in vector registers and moved them back every step).
#if defined(ACTORLLM_SIMD_AVX512) || defined(ACTORLLM_SIMD_AVX2)
  // The output rows are read (a later K block) or written after the loop: asked for now, they arrive during it.
  for (int m = 0; m < M; ++m)
    _mm_prefetch(reinterpret_cast<const char*>(a.y + m * a.ldy), _MM_HINT_T0);
#endif
  const auto* wp = static_cast<const float*>(a.wp);
  const float* x_end = a.xp + a.kc * gemm_mr;
  for (int64_t i = -a.kc * gemm_mr; i != 0; i += gemm_mr, wp += gemm_nr) {
    vf w0 = simd::load(wp);
    vf w1 = simd::load(wp + W);
    for (int m = 0; m < M; ++m) {
      vf xb = simd::set1(x_end[i + m]);
      acc0[m] = simd::fmadd(xb, w0, acc0[m]);
      acc1[m] = simd::fmadd(xb, w1, acc1[m]);
    }
  }
  gemm_tile_store<M>(a, acc0, acc1);
}

#if defined(ACTORLLM_SIMD_AVX2)
// gemm_tile over bf16 pairs (a panel gemm_pack_b16 wrote, or 16 outputs of a weight packed at load): each 32 bytes of
// a half give its outputs at two inputs, the first by a shift, the second by a mask (the vector read from L1 again:
// 16 ymm registers hold the 12 accumulators, the two weight vectors and the broadcast). The same products and sums, in
// the same order, as gemm_tile. Prefetch: the pairs stream from memory (a weight packed at load, first read by this
// tile): each step asks for the 128 bytes of all 32 outputs a KiB ahead, so that the tiles of the panel's other 16
// outputs find their half in L2 (they read every other line; without, each half was a stream of 64 bytes in 128 that
// the hardware prefetchers followed poorly).
template <int M, bool Prefetch>
void gemm_tile_b16(const gemm_tile_args& a) {
  vf acc0[M], acc1[M];
  for (int m = 0; m < M; ++m) {
    acc0[m] = simd::zero();
    acc1[m] = simd::zero();
  }
  for (int m = 0; m < M; ++m)
    _mm_prefetch(reinterpret_cast<const char*>(a.y + m * a.ldy), _MM_HINT_T0);
  const auto* w0p = static_cast<const float*>(a.wp);
  const float* w1p = w0p + a.second_half;
  const int64_t stride = a.pair_stride;
  auto fma_row = [&](const float* xk, vf w0, vf w1) {
    for (int m = 0; m < M; ++m) {
      const vf xb = simd::set1(xk[m]);
      acc0[m] = simd::fmadd(xb, w0, acc0[m]);
      acc1[m] = simd::fmadd(xb, w1, acc1[m]);
    }
  };
  const vf high_mask = pair_high_mask();
  const float* x_end = a.xp + a.kc / 2 * 2 * gemm_mr;
  for (int64_t i = -(a.kc / 2) * 2 * gemm_mr; i != 0; i += 2 * gemm_mr, w0p += stride, w1p += stride) {
    if constexpr (Prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(w0p) + gemm_stream_prefetch_bytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w0p) + gemm_stream_prefetch_bytes + 64, _MM_HINT_T0);
    }
    fma_row(x_end + i, pair_low(w0p), pair_low(w1p));
    fma_row(x_end + i + gemm_mr, pair_high(w0p, high_mask), pair_high(w1p, high_mask));
  }
  if (a.kc % 2 != 0)
    fma_row(x_end, pair_low(w0p), pair_low(w1p));
  gemm_tile_store<M>(a, acc0, acc1);
}
#endif

using gemm_tile_fn = void (*)(const gemm_tile_args&);

// The panel a GEMM over weights of type D packs: with AVX2, bf16 weights stay bf16 (gemm_pack_b16, read by
// gemm_tile_b16); everything else is widened to f32 (gemm_pack, read by gemm_tile).
template <dtype D>
#if defined(ACTORLLM_SIMD_AVX2)
constexpr bool gemm_bf16_panel = D == dtype::bf16;
#else
constexpr bool gemm_bf16_panel = false;
#endif

// Where a GEMM tile reads the panel of outputs [o0, o0 + gemm_nr) over inputs [k0, k0 + kc) (gemm_tile_args' wp,
// pair_stride and second_half).
struct gemm_panel {
  const void* wp;
  int64_t pair_stride = 0;
  int64_t second_half = 0;
};

// That panel: packed into buf (gemm_pack, or gemm_pack_b16 for bf16 with AVX2), or, for a weight packed at load, where
// it lies in the weight.
template <dtype D>
gemm_panel gemm_panel_of(const fma_target& target, int64_t n_in, int64_t o0, int64_t k0, int64_t kc, float* buf) {
#if defined(ACTORLLM_SIMD_AVX2)
  if constexpr (gemm_bf16_panel<D>) {
    if (target.packed)
      return {loaded_panel_pairs(target.w, n_in, o0, k0), loaded_panel_rows, W};
    gemm_pack_b16(static_cast<const uint16_t*>(target.w), n_in, target.n_out, o0, k0, kc,
                  reinterpret_cast<uint16_t*>(buf));
    return {buf, W, gemm_b16_half(kc) / 2};
  }
#endif
  gemm_pack<D>(target.w, n_in, target.n_out, o0, k0, kc, buf);
  return {buf};
}

// The register tiles over the panel gemm_panel_of<D> points to: entry m - 1 for m token rows (1 .. gemm_mr), and
// gemm_mr + m - 1 for the tile that streams a weight packed at load (gemm_tile_b16's Prefetch).
template <dtype D, size_t... I>
constexpr std::array<gemm_tile_fn, sizeof...(I)> gemm_table(std::index_sequence<I...>) {
#if defined(ACTORLLM_SIMD_AVX2)
  if constexpr (gemm_bf16_panel<D>)
    return {&gemm_tile_b16<static_cast<int>(I % gemm_mr) + 1, (I >= gemm_mr)>...};
#endif
  return {&gemm_tile<static_cast<int>(I % gemm_mr) + 1>...};
}

template <dtype D>
void gemm(const float* x, int64_t n_tokens, int64_t n_in, std::span<const fma_target> targets, thread_pool& pool) {
  static constexpr auto table = gemm_table<D>(std::make_index_sequence<2 * gemm_mr>{});
  const group_items panels(targets, gemm_nr);
  pool.parallel_for(panels.total(), [&](int64_t p_begin, int64_t p_end) {
    thread_local std::vector<float> packed;  // 32 KiB with AVX-512 (a bf16 panel uses half); per thread, reused
    packed.resize(static_cast<size_t>(gemm_kc * gemm_nr));
    thread_local std::vector<float> packed_x;  // the chunk's token rows in this K block, by register tile
    // (+ W: gemm_pack_x's last vector store reaches past the last micro-panel)
    packed_x.resize(static_cast<size_t>((gemm_tc + gemm_mr - 1) / gemm_mr * gemm_mr * gemm_kc + W));
    alignas(64) float bias_pad[gemm_nr];
    for (int64_t t0 = 0; t0 < n_tokens; t0 += gemm_tc) {
      int64_t tc = std::min(gemm_tc, n_tokens - t0);
      for (int64_t k0 = 0; k0 < n_in; k0 += gemm_kc) {
        int64_t kc = std::min(gemm_kc, n_in - k0);
        for (int64_t m0 = t0; m0 < t0 + tc; m0 += gemm_mr)
          gemm_pack_x(x, n_in, m0, static_cast<int>(std::min<int64_t>(gemm_mr, t0 + tc - m0)), k0, kc,
                      packed_x.data() + (m0 - t0) * kc);
        panels.for_each(p_begin, p_end, [&](size_t t, int64_t lp_begin, int64_t lp_end) {
          const fma_target& target = targets[t];
          const int64_t n_out = target.n_out;
          for (int64_t p = lp_begin; p < lp_end; ++p) {
            int64_t o0 = p * gemm_nr;
            int n_valid = static_cast<int>(std::min<int64_t>(gemm_nr, n_out - o0));
            const gemm_panel panel = gemm_panel_of<D>(target, n_in, o0, k0, kc, packed.data());
            const float* tile_bias = nullptr;
            if (target.bias != nullptr && k0 == 0) {
              for (int j = 0; j < gemm_nr; ++j)
                bias_pad[j] = j < n_valid ? target.bias[o0 + j] : 0.0f;
              tile_bias = bias_pad;
            }
            for (int64_t m0 = t0; m0 < t0 + tc; m0 += gemm_mr) {
              int mm = static_cast<int>(std::min<int64_t>(gemm_mr, t0 + tc - m0));
              gemm_tile_args args{packed_x.data() + (m0 - t0) * kc,
                                  panel.wp,
                                  kc,
                                  panel.pair_stride,
                                  panel.second_half,
                                  target.y + m0 * n_out + o0,
                                  n_out,
                                  n_valid,
                                  k0 > 0,
                                  tile_bias};
              // The first tile over a weight packed at load reads it from memory (gemm_tile_b16's Prefetch).
              const bool streams = target.packed && m0 == t0;
              table[static_cast<size_t>((streams ? gemm_mr : 0) + mm - 1)](args);
            }
          }
        });
      }
    }
  });
}

}  // namespace

namespace {

// The f32-FMA algorithms over targets of one weight type, as one parallel call. x is already rounded to bf16 for
// bf16 weights.
void matmul_fma(const float* x, int64_t n_tokens, int64_t n_in, std::span<const fma_target> targets, dtype wtype,
                thread_pool& pool, matmul_path path) {
#if defined(ACTORLLM_SIMD_AVX2)
  if (targets.front().packed) {  // then all are (matmul_group), and bf16
    if (path == matmul_path::automatic)
      path = n_tokens < packed_gemm_min_tokens ? matmul_path::gemv : matmul_path::gemm;
    path == matmul_path::gemv ? panel_gemv(x, n_tokens, n_in, targets, pool)
                              : gemm<dtype::bf16>(x, n_tokens, n_in, targets, pool);
    return;
  }
#endif
  if (path == matmul_path::automatic)
    path = n_tokens < matmul_gemm_min_tokens ? matmul_path::gemv : matmul_path::gemm;
  bool use_gemv = path == matmul_path::gemv;
  switch (wtype) {
    case dtype::f32:
      use_gemv ? gemv<dtype::f32>(x, n_tokens, n_in, targets, pool)
               : gemm<dtype::f32>(x, n_tokens, n_in, targets, pool);
      return;
    case dtype::f16:
      use_gemv ? gemv<dtype::f16>(x, n_tokens, n_in, targets, pool)
               : gemm<dtype::f16>(x, n_tokens, n_in, targets, pool);
      return;
    case dtype::bf16:
      use_gemv ? gemv<dtype::bf16>(x, n_tokens, n_in, targets, pool)
               : gemm<dtype::bf16>(x, n_tokens, n_in, targets, pool);
      return;
    case dtype::fp8_e4m3:
    case dtype::i32:
    case dtype::i64:
      break;
  }
  ACTORLLM_CHECK(false, "matmul: integer types hold no weights or activations");
}

// x rounded to bf16 and back, for the f32-FMA path of bf16 weights (same products as the vdpbf16ps path).
const float* rounded_to_bf16(const float* x, int64_t n) {
  thread_local std::vector<float> storage;
  storage.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    storage[static_cast<size_t>(i)] = bf16_to_f32(f32_to_bf16(x[i]));
  return storage.data();
}

std::atomic<bf16_kernels> bf16_kernel_choice{bf16_kernels::best};

bool use_bf16_dot() { return have_bf16_dot_kernels() && bf16_kernel_choice.load() != bf16_kernels::fma; }

void check_packed(const matmul_target& t) {
  ACTORLLM_CHECK(!t.packed || (t.wtype == dtype::bf16 && (have_bf16_dot_kernels() || fma_bf16_panels)),
                 "matmul: packed weights are bf16 and need this build's vdpbf16ps or AVX2 kernels");
  ACTORLLM_CHECK(!t.compact || (t.packed && have_compact_panel_kernels()),
                 "matmul: compact panels are packed weights and need this build's AVX512-VBMI kernels");
}

void check_dims(int64_t n_tokens, int64_t n_in, int64_t n_out) {
  ACTORLLM_CHECK(n_tokens >= 0 && n_in >= 0 && n_out >= 0, "matmul: negative dimension");
}

// Fills y with the bias (or zeros): the product over an empty input.
void bias_only(int64_t n_tokens, int64_t n_out, const float* bias, float* y) {
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t o = 0; o < n_out; ++o)
      y[t * n_out + o] = bias != nullptr ? bias[o] : 0.0f;
}

}  // namespace

void set_bf16_kernels(bf16_kernels k) { bf16_kernel_choice.store(k); }
bf16_kernels get_bf16_kernels() { return bf16_kernel_choice.load(); }

bool bf16_panels_preferred() {
  return use_bf16_dot() || (fma_bf16_panels && bf16_kernel_choice.load() != bf16_kernels::fma);
}

void matmul(const float* x, int64_t n_tokens, int64_t n_in, const void* w, dtype wtype, int64_t n_out,
            const float* bias, float* y, thread_pool& pool, matmul_path path) {
  const matmul_target target{w, wtype, n_out, bias, y};
  matmul_group(x, n_tokens, n_in, std::span{&target, 1}, pool, path);
}

void matmul(const float* x, int64_t n_tokens, int64_t n_in, const void* w, dtype wtype, int64_t n_out,
            const float* bias, float* y, thread_pool& pool) {
  matmul(x, n_tokens, n_in, w, wtype, n_out, bias, y, pool, matmul_path::automatic);
}

void matmul_group(const float* x, int64_t n_tokens, int64_t n_in, std::span<const matmul_target> targets,
                  thread_pool& pool, matmul_path path) {
  ACTORLLM_CHECK(targets.size() <= 8, "matmul_group: at most 8 targets");
  bool all_bf16 = !targets.empty(), any_packed = false, all_packed = !targets.empty();
  for (const matmul_target& t : targets) {
    check_dims(n_tokens, n_in, t.n_out);
    check_packed(t);
    all_bf16 = all_bf16 && t.wtype == dtype::bf16;
    any_packed = any_packed || t.packed;
    all_packed = all_packed && t.packed;
  }
  if (n_tokens == 0)
    return;
  if (n_in == 0) {
    for (const matmul_target& t : targets)
      bias_only(n_tokens, t.n_out, t.bias, t.y);
    return;
  }
  if ((all_packed && have_bf16_dot_kernels()) || (all_bf16 && !any_packed && use_bf16_dot())) {
    matmul_bf16_dot(x, n_tokens, n_in, targets, false, pool, path);
    return;
  }
  if (any_packed && !all_packed) {  // packed and row-major weights in one group: one call each
    for (const matmul_target& t : targets)
      matmul_group(x, n_tokens, n_in, std::span{&t, 1}, pool, path);
    return;
  }
  for (const matmul_target& t : targets)
    ACTORLLM_CHECK(t.n_out == 0 || t.wtype == dtype::bf16 || t.wtype == dtype::f16 || t.wtype == dtype::f32,
                   "matmul: integer types hold no weights or activations");
  // The targets of each weight type as one call (bf16's input rounded once).
  for (dtype type : {dtype::bf16, dtype::f16, dtype::f32}) {
    std::array<fma_target, 8> group{};
    size_t n = 0;
    for (const matmul_target& t : targets)
      if (t.wtype == type && t.n_out > 0)
        group[n++] = fma_target{t.w, t.n_out, t.bias, t.y, t.packed, t.owner};  // never compact (check_packed)
    if (n != 0)
      matmul_fma(type == dtype::bf16 ? rounded_to_bf16(x, n_tokens * n_in) : x, n_tokens, n_in,
                 std::span{group.data(), n}, type, pool, path);
  }
}

void matmul_silu_gate(const float* x, int64_t n_tokens, int64_t n_in, const void* w_gate, const void* w_up, dtype wtype,
                      bool packed, bool compact, int64_t n_ff, float* up_scratch, float* out, thread_pool& pool,
                      matmul_path path, std::shared_ptr<const void> gate_owner, std::shared_ptr<const void> up_owner) {
  check_dims(n_tokens, n_in, n_ff);
  const std::array<matmul_target, 2> targets{
      matmul_target{w_gate, wtype, n_ff, nullptr, out, packed, std::move(gate_owner), compact},
      matmul_target{w_up, wtype, n_ff, nullptr, up_scratch, packed, std::move(up_owner), compact}};
  check_packed(targets[0]);
  if (n_tokens == 0 || n_ff == 0)
    return;
  if (n_in > 0 && ((packed && have_bf16_dot_kernels()) || (wtype == dtype::bf16 && use_bf16_dot()))) {
    matmul_bf16_dot(x, n_tokens, n_in, targets, true, pool, path);
    return;
  }
  matmul_group(x, n_tokens, n_in, targets, pool, path);
  silu_mul(out, up_scratch, n_tokens * n_ff, out);
}

}  // namespace actorllm::cpu
