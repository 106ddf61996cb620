// bf16 weights x bf16-rounded activations on vdpbf16ps (AVX512-BF16): each instruction multiplies 16 pairs of bf16
// values exactly and adds both products to 16 f32 accumulators, twice the multiply-adds of an f32 FMA in the same
// issue slot, with no widening of the weights.
//
// The activations are rounded to bf16 once per call (all targets of a group share the rounded copy). Two algorithms:
// - GEMV (few tokens): weight rows are read in the Hugging Face layout, four row streams at a time, prefetched
//   ahead; a tile is up to 4 rows x 4 tokens of vector accumulators, reduced horizontally at the end. The rows of a
//   group's targets form one index space split over the pool, so q/k/v (or gate/up) run in one parallel region.
// - Panels: 32 outputs x a K block in pairs order ([k/2][32] 32-bit words, the operand layout of vdpbf16ps) stay in
//   L1 while a 12 x 32 register tile walks the token rows, broadcasting one pair of activations per instruction
//   pair. Packed weights (packed at load) are read in place at every batch size; row-major ones are packed per call
//   for many tokens.
// Gated (SwiGLU) groups compute gate and up rows of the same outputs side by side and write silu(gate) * up.
#include "kernels/cpu/matmul_bf16.hpp"

#include <cpuid.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/amx_bf16.hpp"
#include "kernels/cpu/compact_panels.hpp"
#include "kernels/cpu/home_streams.hpp"
#include "kernels/cpu/read_ahead.hpp"
#include "kernels/cpu/simd.hpp"
#include "kernels/dtype.hpp"
#include "util/check.hpp"

namespace actorllm::cpu {

namespace {
constexpr int64_t panel_rows = 32;
int64_t panel_k_pad(int64_t n_in) { return (n_in + 31) / 32 * 32; }
}  // namespace

std::string cpu_vendor() {
  unsigned max_leaf = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &max_leaf, &b, &c, &d) == 0)
    return {};
  char name[12];
  std::memcpy(name, &b, 4);
  std::memcpy(name + 4, &d, 4);
  std::memcpy(name + 8, &c, 4);
  return {name, sizeof name};
}

int cpu_family() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0)
    return 0;
  const int base = static_cast<int>((a >> 8) & 0xf);
  return base == 0xf ? base + static_cast<int>((a >> 20) & 0xff) : base;
}

decode_read_pattern decode_read_pattern_for(std::string_view vendor, int family) {
  if (vendor == "GenuineIntel")
    return {.streams = 2,
            .prefetch_bytes = 1024,
            .compact_streams = 2,
            .compact_prefetch_blocks = 11,
            .compact_gemm_prefetch_blocks = 4,
            .compact_narrow_dots = true,
            .quantized_prefetch_bytes = 1024};
  if (vendor == "AuthenticAMD" && family >= zen5_family)
    return {.streams = 4,
            .prefetch_bytes = 128,
            .compact_streams = 4,
            .compact_prefetch_blocks = 10,
            .compact_gemm_prefetch_blocks = 48};
  return {.streams = 4,
          .prefetch_bytes = 128,
          .compact_streams = 2,
          .compact_prefetch_blocks = 1,
          .compact_gemm_prefetch_blocks = 4};
}

size_t bf16_panels_bytes(int64_t n_out, int64_t n_in) {
  return static_cast<size_t>((n_out + panel_rows - 1) / panel_rows * panel_rows * panel_k_pad(n_in)) * sizeof(uint16_t);
}

#if defined(ACTORLLM_SIMD_AVX2)
namespace {
// pack_bf16_panel with AVX2: each 8 rows of the panel transposed into its pairs (simd::transpose_bf16_pairs8).
void pack_bf16_panel_avx2(const uint16_t* w, int64_t n_in, int64_t n_out, int64_t o0, int64_t k_pad, uint32_t* panel) {
  for (int64_t g = 0; g < panel_rows / 8; ++g) {
    const uint16_t* rows[8];
    for (int i = 0; i < 8; ++i) {
      const int64_t r = o0 + g * 8 + i;
      rows[i] = r < n_out ? w + r * n_in : nullptr;
    }
    simd::transpose_bf16_pairs8(rows, n_in, k_pad, panel + g * 8, panel_rows);
  }
}
}  // namespace
#endif

void pack_one_bf16_panel(const uint16_t* w, int64_t n_out, int64_t n_in, int64_t p, uint16_t* panel) {
  const int64_t k_pad = panel_k_pad(n_in);
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  // 16 x 32 transposes in registers: packing is most of a CPU model's start-up, and the scalar loop below is ~10x
  // slower (two bytes at a time, each 64 bytes from the last).
  pack_bf16_panel(w, n_in, n_out, p * panel_rows, k_pad, reinterpret_cast<uint32_t*>(panel));
#elif defined(ACTORLLM_SIMD_AVX2)
  pack_bf16_panel_avx2(w, n_in, n_out, p * panel_rows, k_pad, reinterpret_cast<uint32_t*>(panel));
#else
  // Row by row: each source row is read once, in order; its pairs land 32 pairs apart in the panel.
  for (int64_t r = 0; r < panel_rows; ++r) {
    const int64_t row = p * panel_rows + r;
    for (int64_t k = 0; k < k_pad; ++k) {
      const uint16_t v = row < n_out && k < n_in ? w[row * n_in + k] : uint16_t{0};
      panel[((k / 2) * panel_rows + r) * 2 + (k % 2)] = v;
    }
  }
#endif
}

void pack_bf16_panels(const uint16_t* w, int64_t n_out, int64_t n_in, uint16_t* out, thread_pool& pool) {
  const int64_t k_pad = panel_k_pad(n_in);
  const int64_t n_panels = (n_out + panel_rows - 1) / panel_rows;
  pool.parallel_for(n_panels, [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p)
      pack_one_bf16_panel(w, n_out, n_in, p, out + p * panel_rows * k_pad);
  });
}

#if defined(__AVX512F__) && defined(__AVX512BF16__)

namespace {

constexpr int64_t k_step = 32;  // bf16 elements per vector

// The GEMMs (5 tokens and more) run on AMX tiles where the process may use them, unless set_bf16_kernels asked for
// vdpbf16ps only.
bool use_amx() { return get_bf16_kernels() == bf16_kernels::best && amx_bf16_usable(); }

// Rounds token rows to bf16: xb [n_tokens][ld], zero from n_in to k_pad (k_pad a multiple of k_step, ld >= k_pad).
void round_rows(const float* x, int64_t n_tokens, int64_t n_in, uint16_t* xb, int64_t k_pad, int64_t ld) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* src = x + t * n_in;
    uint16_t* dst = xb + t * ld;
    for (int64_t k = 0; k < k_pad; k += k_step) {
      const int64_t left = n_in - k;
      const __mmask16 lo = left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
      const int64_t left_hi = left - 16;
      const __mmask16 hi = left_hi >= 16  ? __mmask16(0xffff)
                           : left_hi <= 0 ? __mmask16(0)
                                          : __mmask16((1u << left_hi) - 1);
      const __m512 a = _mm512_maskz_loadu_ps(lo, src + k);
      const __m512 b = _mm512_maskz_loadu_ps(hi, src + k + 16);
      _mm512_storeu_si512(dst + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));
    }
  }
}

inline __mmask32 tail_mask(int64_t n) { return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1; }

// One target's rows as the GEMV and GEMM read them.
struct target_view {
  const uint16_t* w;  // row-major, or panels when `packed`
  int64_t n_out;
  const float* bias;
  float* y;
  bool packed;
  bool compact = false;     // packed as compact panels (compact_panels.hpp)
  size_t panel_stride = 0;  // bytes from one panel to the next, when packed

  // Where panel p starts (packed).
  const uint8_t* panel(int64_t p) const {
    return reinterpret_cast<const uint8_t*>(w) + static_cast<size_t>(p) * panel_stride;
  }
};

// ---------------------------------------------------------------------------------------------------------------
// GEMV

constexpr int gemv_rows = 4;    // row streams per tile
constexpr int gemv_tokens = 4;  // tokens per tile
// Prefetch distance along each row: 512 bytes (8 lines) ahead, as in the f32 GEMV (measured on AVX-512 machines).
constexpr size_t gemv_prefetch_bytes = 512;

// sums[r][t] = dot(rows[r], token row t) over n_in elements, for R rows and TT tokens of xs (rows ld apart).
template <int R, int TT>
void dot_tile(const uint16_t* const* rows, const uint16_t* xs, int64_t ld, int64_t n_in, float (*sums)[TT]) {
  __m512 acc[R][TT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t)
      acc[r][t] = _mm512_setzero_ps();
  const int64_t k_main = n_in / k_step * k_step;
  for (int64_t k = 0; k < k_main; k += k_step) {
    __m512i wv[R];
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[r] + k) + gemv_prefetch_bytes, _MM_HINT_T0);
      wv[r] = _mm512_loadu_si512(rows[r] + k);
    }
    for (int t = 0; t < TT; ++t) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xs + t * ld + k));
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], reinterpret_cast<__m512bh>(wv[r]), xv);
    }
  }
  if (k_main < n_in) {
    // Masked loads never touch the bytes past a row (nor fault past the matrix); the token rows are zero-padded.
    const __mmask32 m = tail_mask(n_in - k_main);
    __m512i wv[R];
    for (int r = 0; r < R; ++r)
      wv[r] = _mm512_maskz_loadu_epi16(m, rows[r] + k_main);
    for (int t = 0; t < TT; ++t) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xs + t * ld + k_main));
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], reinterpret_cast<__m512bh>(wv[r]), xv);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t)
      sums[r][t] = _mm512_reduce_add_ps(acc[r][t]);
}

// Work units of `rows` outputs each, numbered across the targets one after another: target i owns units
// [begin[i], begin[i + 1]). A gated group numbers its gate target only: a unit covers the same outputs of gate and up.
struct unit_numbering {
  std::array<int64_t, 9> begin{};
  size_t n_targets = 0;

  unit_numbering(std::span<const target_view> targets, bool gated, int64_t rows)
      : n_targets(gated ? 1 : targets.size()) {
    for (size_t i = 0; i < n_targets; ++i)
      begin[i + 1] = begin[i] + (targets[i].n_out + rows - 1) / rows;
  }
  int64_t total() const { return begin[n_targets]; }
  /// The target of unit u, searching on from target i (units are visited in increasing order).
  size_t target_of(int64_t u, size_t i) const {
    while (u >= begin[i + 1])
      ++i;
    return i;
  }
};

struct gemv_call {
  const uint16_t* xb;  // token rows rounded to bf16, ld apart
  int64_t ld;
  int64_t k_pad;
  int64_t n_in;
  int64_t n_tokens;
};

// Rows [row0, row0 + R) of one target for tokens [t0, t0 + TT).
template <int R, int TT>
void gemv_tile(const gemv_call& c, const target_view& tv, int64_t row0, int64_t t0) {
  const uint16_t* rows[R];
  for (int r = 0; r < R; ++r)
    rows[r] = tv.w + (row0 + r) * c.n_in;
  float sums[R][TT];
  dot_tile<R, TT>(rows, c.xb + t0 * c.ld, c.ld, c.n_in, sums);
  for (int t = 0; t < TT; ++t) {
    float* out = tv.y + (t0 + t) * tv.n_out + row0;
    for (int r = 0; r < R; ++r)
      out[r] = sums[r][t] + (tv.bias != nullptr ? tv.bias[row0 + r] : 0.0f);
  }
}

// Gate and up rows [row0, row0 + R) side by side (2R streams) for tokens [t0, t0 + TT); writes silu(gate) * up.
template <int R, int TT>
void gemv_gated_tile(const gemv_call& c, const target_view& gate, const target_view& up, int64_t row0, int64_t t0) {
  const uint16_t* rows[2 * R];
  for (int r = 0; r < R; ++r) {
    rows[r] = gate.w + (row0 + r) * c.n_in;
    rows[R + r] = up.w + (row0 + r) * c.n_in;
  }
  float sums[2 * R][TT];
  dot_tile<2 * R, TT>(rows, c.xb + t0 * c.ld, c.ld, c.n_in, sums);
  for (int t = 0; t < TT; ++t) {
    float g[R], u[R];
    for (int r = 0; r < R; ++r) {
      g[r] = sums[r][t] + (gate.bias != nullptr ? gate.bias[row0 + r] : 0.0f);
      u[r] = sums[R + r][t] + (up.bias != nullptr ? up.bias[row0 + r] : 0.0f);
    }
    silu_mul(g, u, R, gate.y + (t0 + t) * gate.n_out + row0);
  }
}

using gemv_fn = void (*)(const gemv_call&, const target_view&, int64_t, int64_t);
using gemv_gated_fn = void (*)(const gemv_call&, const target_view&, const target_view&, int64_t, int64_t);

template <size_t... I>
constexpr std::array<gemv_fn, sizeof...(I)> gemv_table(std::index_sequence<I...>) {
  return {&gemv_tile<static_cast<int>(I / gemv_tokens) + 1, static_cast<int>(I % gemv_tokens) + 1>...};
}

// Gated tiles take half as many rows per matrix so that a tile still reads four streams.
constexpr int gemv_gated_rows = gemv_rows / 2;

template <size_t... I>
constexpr std::array<gemv_gated_fn, sizeof...(I)> gemv_gated_table(std::index_sequence<I...>) {
  return {&gemv_gated_tile<static_cast<int>(I / gemv_tokens) + 1, static_cast<int>(I % gemv_tokens) + 1>...};
}

void gemv(const gemv_call& c, std::span<const target_view> targets, bool gated, thread_pool& pool) {
  static constexpr auto table = gemv_table(std::make_index_sequence<gemv_rows * gemv_tokens>{});
  static constexpr auto gated_table = gemv_gated_table(std::make_index_sequence<gemv_gated_rows * gemv_tokens>{});
  const int group_rows = gated ? gemv_gated_rows : gemv_rows;
  const unit_numbering groups(targets, gated, group_rows);
  pool.parallel_for(groups.total(), [&](int64_t g_begin, int64_t g_end) {
    size_t i = 0;
    for (int64_t g = g_begin; g < g_end; ++g) {
      i = groups.target_of(g, i);
      const target_view& tv = targets[i];
      const int64_t row0 = (g - groups.begin[i]) * group_rows;
      const int rows = static_cast<int>(std::min<int64_t>(group_rows, tv.n_out - row0));
      for (int64_t t0 = 0; t0 < c.n_tokens; t0 += gemv_tokens) {
        const int tt = static_cast<int>(std::min<int64_t>(gemv_tokens, c.n_tokens - t0));
        const size_t fn = static_cast<size_t>((rows - 1) * gemv_tokens + (tt - 1));
        if (gated)
          gated_table[fn](c, targets[0], targets[1], row0, t0);
        else
          table[fn](c, tv, row0, t0);
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// GEMM

constexpr int gemm_nr = 32;  // outputs per panel: two vectors
constexpr int gemm_mr = 12;  // token rows per register tile: 24 accumulators + 2 panel vectors
// Token rows of a compact panel's first tile (gemm_tile_compact), whose step's rebuild takes registers of its own: 12
// rows measured the same as 10 (16 and 32 tokens, alternated), and 10 leave GCC room.
constexpr int compact_mr = 10;
constexpr int64_t panel_prefetch_bytes = 1024;
constexpr int64_t bf16_dot_gemm_min_tokens = 384;  // row-major weights: GEMV below, per-call panels from here

// Packs rows [o0, o0 + 32) x inputs [0, k_pad) of w into panel[k_pad / 2][32] 32-bit pairs; rows past n_out and
// inputs past n_in become zeros.
void pack_panel(const uint16_t* w, int64_t n_in, int64_t n_out, int64_t o0, int64_t k_pad, uint32_t* panel) {
  for (int h = 0; h < gemm_nr / 16; ++h) {
    const int64_t r0 = o0 + h * 16;
    const int valid = static_cast<int>(std::clamp<int64_t>(n_out - r0, 0, 16));
    for (int64_t k = 0; k < k_pad; k += k_step) {
      const int64_t left = n_in - k;
      const __mmask32 m = left <= 0 ? __mmask32(0) : tail_mask(left);
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] =
            i < valid ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, w + (r0 + i) * n_in + k)) : _mm512_setzero_ps();
      simd::transpose16(r);  // r[j]: input pair k/2 + j of the 16 rows
      for (int j = 0; j < 16; ++j)
        _mm512_storeu_ps(reinterpret_cast<float*>(panel + (k / 2 + j) * gemm_nr + h * 16), r[j]);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Compact panels (compact_panels.hpp): each step's 64 bf16 values rebuilt from their low bytes and 4-bit codes of the
// high bytes. Needs AVX512-VBMI (vpermb).
#if defined(__AVX512VBMI__)
constexpr bool compact_kernels = true;
decode_read_pattern& pattern_in_use();

// The panel's table of high bytes in each 128-bit lane: vpermb reads entry (code & 15) whatever the code byte's bits
// 4-5.
inline __m512i compact_table(const uint8_t* panel) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(panel)));
}

// The 64 bf16 values of a step from its codes (each in its byte's low nibble; bits 4-5 are ignored) and low bytes: two
// vectors of 32, in the plain panel's order; +0 where the panel has an exception (added at its end).
inline void compact_values(__m512i code, __m512i lo, __m512i table, __m512bh& b0, __m512bh& b1) {
  const __m512i hi = _mm512_permutexvar_epi8(code, table);
  b0 = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi8(lo, hi));
  b1 = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi8(lo, hi));
}

// Step h (0 or 1) of the block at `block`, whose 64 code bytes are `codes`.
inline void compact_step(const uint8_t* block, __m512i codes, int h, __m512i table, __m512bh& b0, __m512bh& b1) {
  const __m512i code = h == 0 ? codes : _mm512_srli_epi16(codes, 4);  // the step's code in each byte's low nibble
  compact_values(code, _mm512_loadu_si512(block + h * 64), table, b0, b1);
}

// The plain panel ([k_pad / 2][32] pairs) of a compact one, every value of it, for the GEMMs that read each panel
// many times (AMX).
void expand_panel(const uint8_t* panel, int64_t k_pad, uint32_t* plain) {
  const __m512i table = compact_table(panel);
  const uint8_t* block = panel + compact_blocks_offset;
  uint32_t* out = plain;
  for (int64_t b = 0; b < k_pad / 4; ++b, block += compact_block_bytes, out += 2 * gemm_nr) {
    const __m512i codes = _mm512_loadu_si512(block + 128);
    for (int h = 0; h < 2; ++h) {
      __m512bh b0, b1;
      compact_step(block, codes, h, table, b0, b1);
      _mm512_storeu_si512(out + h * gemm_nr, reinterpret_cast<__m512i>(b0));
      _mm512_storeu_si512(out + h * gemm_nr + 16, reinterpret_cast<__m512i>(b1));
    }
  }
  auto* values = reinterpret_cast<uint16_t*>(plain);
  const compact_exception* e = compact_exception_list(panel, k_pad);
  for (int64_t i = 0, n = compact_exception_count(panel); i < n; ++i)
    values[plain_panel_index(e[i])] = e[i].value;
}

// How far ahead of a step compact_pair_rows asks for a compact panel's lines, into L2: 32 blocks (6 KiB), the 8 KiB of
// plain rows the AMX kernels ask for ahead of theirs (amx_bf16.cpp).
constexpr size_t rebuilt_prefetch_bytes = 32 * compact_block_bytes;

// Pair rows [kp, kp + 16) of a compact panel as its plain panel holds them (panel_rows_fn of
// amx_rebuilt_panels_product): the step's 8 blocks rebuilt, then the exceptions among them written over their zeros.
void compact_pair_rows(const void* panel_bytes, int64_t k_pad, int64_t kp, uint32_t* rows) {
  const auto* panel = static_cast<const uint8_t*>(panel_bytes);
  const __m512i table = compact_table(panel);
  const uint8_t* block = panel + compact_blocks_offset + static_cast<size_t>(kp / 2) * compact_block_bytes;
  uint32_t* out = rows;
  for (int b = 0; b < 8; ++b, block += compact_block_bytes, out += 2 * gemm_nr) {
    for (int line = 0; line < 3; ++line)
      _mm_prefetch(reinterpret_cast<const char*>(block) + rebuilt_prefetch_bytes + 64 * line, _MM_HINT_T1);
    const __m512i codes = _mm512_loadu_si512(block + 128);
    for (int h = 0; h < 2; ++h) {
      __m512bh b0, b1;
      compact_step(block, codes, h, table, b0, b1);
      _mm512_storeu_si512(out + h * gemm_nr, reinterpret_cast<__m512i>(b0));
      _mm512_storeu_si512(out + h * gemm_nr + 16, reinterpret_cast<__m512i>(b1));
    }
  }
  // The exceptions are by input: those of inputs [2 kp, 2 kp + 32) in a run.
  const compact_exception* list = compact_exception_list(panel, k_pad);
  const compact_exception* end = list + compact_exception_count(panel);
  const auto k_begin = static_cast<uint32_t>(2 * kp);
  auto* values = reinterpret_cast<uint16_t*>(rows);
  for (const compact_exception *e =
           std::lower_bound(list, end, k_begin, [](const compact_exception&x, uint32_t k) { return x.k < k; });
       e != end && e->k < k_begin + 32; ++e)
    values[plain_panel_index(*e) - kp * 64] = e->value;
}

// Adds a compact panel's exceptions to a tile's M x 32 sums (token row m's in acc0[m], outputs 0-15, and acc1[m],
// 16-31), one after another in the list's order: value x the bf16 input (a product of two bf16 is exact in float).
// Out of line, with the sums in memory, once a panel.
template <int M>
[[gnu::noinline]] void add_exceptions_to(const uint8_t* panel, int64_t k_pad, const uint16_t* a, int64_t lda,
                                         __m512* acc0, __m512* acc1) {
  alignas(64) float sums[M][gemm_nr];
  for (int m = 0; m < M; ++m) {
    _mm512_store_ps(sums[m], acc0[m]);
    _mm512_store_ps(sums[m] + 16, acc1[m]);
  }
  const compact_exception* e = compact_exception_list(panel, k_pad);
  for (int64_t i = 0, n = compact_exception_count(panel); i < n; ++i) {
    const float w = bf16_to_f32(e[i].value);
    for (int m = 0; m < M; ++m)
      sums[m][e[i].output] += w * bf16_to_f32(a[m * lda + e[i].k]);
  }
  for (int m = 0; m < M; ++m) {
    acc0[m] = _mm512_load_ps(sums[m]);
    acc1[m] = _mm512_load_ps(sums[m] + 16);
  }
}

// add_exceptions_to where the panel has any. The sums pass through copies, so that the kernels' own accumulators never
// have their address taken (GCC 12 then keeps them in memory inside the loop too).
template <int M>
inline void add_compact_exceptions(const uint8_t* panel, int64_t k_pad, const uint16_t* a, int64_t lda, __m512* acc0,
                                   __m512* acc1) {
  if (compact_exception_count(panel) == 0)
    return;
  __m512 s0[M], s1[M];
  for (int m = 0; m < M; ++m) {
    s0[m] = acc0[m];
    s1[m] = acc1[m];
  }
  add_exceptions_to<M>(panel, k_pad, a, lda, s0, s1);
  for (int m = 0; m < M; ++m) {
    acc0[m] = s0[m];
    acc1[m] = s1[m];
  }
}
#else
constexpr bool compact_kernels = false;
void expand_panel(const uint8_t* panel, int64_t k_pad, uint32_t* plain) {
  expand_compact_panel_reference(panel, k_pad, plain);
}
void compact_pair_rows(const void*, int64_t, int64_t, uint32_t*) {
  ACTORLLM_CHECK(false, "compact_pair_rows: this build has no compact-panel kernels (AMX builds have them)");
}
#endif

// A packed panel as the GEMMs read it: in place when plain, else expanded into `buffer` (k_pad / 2 x 32 pairs).
const uint32_t* plain_panel(const target_view& tv, int64_t p, int64_t k_pad, uint32_t* buffer) {
  if (!tv.compact)
    return reinterpret_cast<const uint32_t*>(tv.panel(p));
  expand_panel(tv.panel(p), k_pad, buffer);
  return buffer;
}

struct gemm_tile_args {
  const uint16_t* a;  // token row 0 of the tile (bf16)
  int64_t lda;
  const uint32_t* panel;
  int64_t k_pad;
  float* y;  // token row 0 of the tile, column o0
  int64_t ldy;
  int n_valid;                       // outputs of the panel that exist
  const float* bias;                 // 32 values (padded), or null
  const uint8_t* compact = nullptr;  // the panel in compact form (streamed decode, a GEMM's first tile)
  // The compact panel whose steps `panel` holds expanded (a GEMM's later tiles), whose exceptions the tile adds.
  const uint8_t* expanded_from = nullptr;
};

// Writes a tile's M x 32 sums (plus the bias) to its outputs, masked to the panel's valid outputs.
template <int M>
inline void store_tile(const gemm_tile_args& t, const __m512* acc0, const __m512* acc1) {
  const __mmask16 m0 = t.n_valid >= 16 ? __mmask16(0xffff) : __mmask16((1u << t.n_valid) - 1);
  const __mmask16 m1 = t.n_valid >= 32   ? __mmask16(0xffff)
                       : t.n_valid <= 16 ? __mmask16(0)
                                         : __mmask16((1u << (t.n_valid - 16)) - 1);
  const __m512 bias0 = t.bias != nullptr ? _mm512_loadu_ps(t.bias) : _mm512_setzero_ps();
  const __m512 bias1 = t.bias != nullptr ? _mm512_loadu_ps(t.bias + 16) : _mm512_setzero_ps();
  for (int m = 0; m < M; ++m) {
    float* out = t.y + m * t.ldy;
    _mm512_mask_storeu_ps(out, m0, t.bias != nullptr ? _mm512_add_ps(acc0[m], bias0) : acc0[m]);
    _mm512_mask_storeu_ps(out + 16, m1, t.bias != nullptr ? _mm512_add_ps(acc1[m], bias1) : acc1[m]);
  }
}

// One pair of bf16 activations at `pair`, broadcast to every 32-bit lane. A load of its own (vpbroadcastd): with the
// pair memcpy'd into an int32 first, GCC 12 kept the streamed kernels' accumulators in memory as well as in registers
// wherever their loop also prefetched or stored, storing each after every update (8 stores a step at batch 1).
inline __m512bh broadcast_pair(const uint16_t* pair) {
  return reinterpret_cast<__m512bh>(_mm512_broadcastd_epi32(_mm_loadu_si32(pair)));
}

// Prefetch: the panel streams from memory (a packed weight read in place), so each step asks for the lines 1 KiB
// ahead; a panel packed per call sits in L1 already.
// AddExceptions: `panel` is a compact panel's steps expanded (t.expanded_from), whose exceptions the sums get.
template <int M, bool Prefetch, bool AddExceptions = false>
void gemm_tile(const gemm_tile_args& t) {
  __m512 acc0[M], acc1[M];
  for (int m = 0; m < M; ++m) {
    acc0[m] = _mm512_setzero_ps();
    acc1[m] = _mm512_setzero_ps();
  }
  // The 12 rows' pointers, the panel's and one counter fill the general registers; the counter runs from -n_kp up to
  // zero against the rows' ends, so that the loop needs no bound register. With `kp < k_pad / 2` GCC 12 kept the
  // bound and a row pointer in vector registers and moved them back every step: the tile ran at 91-93% of the
  // vdpbf16ps rate instead of 99-100% (bench_kernels' tile row), a 512-token prefill 7% slower.
  const uint32_t* p = t.panel;
  const int64_t n_kp = t.k_pad / 2;
  const uint16_t* a_end = t.a + 2 * n_kp;
  for (int64_t i = -n_kp; i != 0; ++i, p += gemm_nr) {
    if constexpr (Prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(p) + panel_prefetch_bytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p) + panel_prefetch_bytes + 64, _MM_HINT_T0);
    }
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
    const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p + 16));
    for (int m = 0; m < M; ++m) {
      int32_t pair;
      std::memcpy(&pair, a_end + m * t.lda + 2 * i, sizeof pair);
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      acc0[m] = _mm512_dpbf16_ps(acc0[m], av, b0);
      acc1[m] = _mm512_dpbf16_ps(acc1[m], av, b1);
    }
  }
#if defined(__AVX512VBMI__)
  if constexpr (AddExceptions)
    add_compact_exceptions<M>(t.expanded_from, t.k_pad, t.a, t.lda, acc0, acc1);
#endif
  store_tile<M>(t, acc0, acc1);
}

using gemm_tile_fn = void (*)(const gemm_tile_args&);

template <bool Prefetch, bool AddExceptions, size_t... I>
constexpr std::array<gemm_tile_fn, sizeof...(I)> gemm_table(std::index_sequence<I...>) {
  return {&gemm_tile<static_cast<int>(I) + 1, Prefetch, AddExceptions>...};
}

#if defined(__AVX512VBMI__)
// Block b (steps 2b and 2b + 1) of gemm_tile_compact.
template <int M, bool Keep>
[[gnu::always_inline]] inline void gemm_compact_block(const uint8_t* blocks, int64_t b, __m512i table,
                                                      size_t gemm_ahead, const uint16_t* a, int64_t lda,
                                                      uint32_t* plain, __m512* acc0, __m512* acc1) {
  const uint8_t* block = blocks + static_cast<size_t>(b) * compact_block_bytes;
  for (int line = 0; line < 3; ++line)
    _mm_prefetch(reinterpret_cast<const char*>(block) + gemm_ahead + 64 * line, _MM_HINT_T0);
  const __m512i codes = _mm512_loadu_si512(block + 128);
  for (int h = 0; h < 2; ++h) {
    __m512bh b0, b1;
    compact_step(block, codes, h, table, b0, b1);
    const int64_t kp = 2 * b + h;
    if constexpr (Keep) {
      _mm512_storeu_si512(plain + kp * gemm_nr, reinterpret_cast<__m512i>(b0));
      _mm512_storeu_si512(plain + kp * gemm_nr + 16, reinterpret_cast<__m512i>(b1));
    }
    for (int m = 0; m < M; ++m) {
      const __m512bh av = broadcast_pair(a + m * lda + 2 * kp);
      acc0[m] = _mm512_dpbf16_ps(acc0[m], av, b0);
      acc1[m] = _mm512_dpbf16_ps(acc1[m], av, b1);
    }
  }
}

// gemm_tile on a compact panel read from memory (t.compact): each step rebuilt in registers (compact_values) and, where
// `Keep`, written to `plain` ([k_pad / 2][32] pairs), from which the chunk's other tiles read the panel (and add its
// exceptions, as this one does at its end). The first tile so overlaps the panel's read with its multiply-adds, as
// gemm_tile<M, true> does on plain panels; expanding the whole panel first and then running the tiles left the read
// exposed: batch-32 decode 0.79x, prefill 512 0.95x of plain panels (bench_cpu_decode, alternated, 2-vCPU Zen 4 VM).
// A block at a time, so that its codes are loaded once and only its second step shifts them.
template <int M, bool Keep>
void gemm_tile_compact(const gemm_tile_args& t, uint32_t* plain) {
  __m512 acc0[M], acc1[M];
  for (int m = 0; m < M; ++m) {
    acc0[m] = _mm512_setzero_ps();
    acc1[m] = _mm512_setzero_ps();
  }
  const uint8_t* blocks = t.compact + compact_blocks_offset;
  const __m512i table = compact_table(t.compact);
  const uint16_t* a = t.a;  // locals: the stores to `plain` could alias t's fields, which GCC then reloads each step
  const int64_t lda = t.lda;
  const int64_t n_blocks = t.k_pad / 4;
  // How far ahead of a step the panel is asked for (decode_read_pattern::compact_gemm_prefetch_blocks).
  const size_t gemm_ahead = static_cast<size_t>(pattern_in_use().compact_gemm_prefetch_blocks) * compact_block_bytes;
  for (int64_t b = 0; b < n_blocks; ++b)
    gemm_compact_block<M, Keep>(blocks, b, table, gemm_ahead, a, lda, plain, acc0, acc1);
  add_compact_exceptions<M>(t.compact, t.k_pad, a, lda, acc0, acc1);
  store_tile<M>(t, acc0, acc1);
}

using gemm_tile_compact_fn = void (*)(const gemm_tile_args&, uint32_t*);

template <bool Keep, size_t... I>
constexpr std::array<gemm_tile_compact_fn, sizeof...(I)> gemm_compact_table(std::index_sequence<I...>) {
  return {&gemm_tile_compact<static_cast<int>(I) + 1, Keep>...};
}
#endif

// The panel's 32 bias values at outputs [o0, o0 + 32) of tv, zero past n_valid, in `pad`; null when tv has no bias.
const float* padded_bias(const target_view& tv, int64_t o0, int n_valid, float* pad) {
  if (tv.bias == nullptr)
    return nullptr;
  for (int j = 0; j < gemm_nr; ++j)
    pad[j] = j < n_valid ? tv.bias[o0 + j] : 0.0f;
  return pad;
}

// A gated group's outputs [o0, o0 + 32) of token rows [t_begin, t_end), gate and up complete: gate = silu(gate) * up.
void combine_gated(std::span<const target_view> targets, int64_t o0, int64_t t_begin, int64_t t_end) {
  const target_view& gate = targets[0];
  const target_view& up = targets[1];
  const int64_t n_valid = std::min<int64_t>(gemm_nr, gate.n_out - o0);
  for (int64_t t = t_begin; t < t_end; ++t) {
    float* g = gate.y + t * gate.n_out + o0;
    silu_mul(g, up.y + t * up.n_out + o0, n_valid, g);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Decode on packed weights: several panel streams per thread
//
// With 1 to 4 tokens a packed weight is read once from memory and the multiply-adds are nearly free, so the read
// pattern is the speed. One panel after another is one sequential stream per thread; on Zen 5 the bandwidth probe
// reads fastest with several interleaved streams per thread, and batch-1 decode of the TinyLlama shape measured
// 69-82% of the probe with one stream against 87-96% with four (bench_cpu_decode, alternated runs, 2 threads).
// So a thread walks S panels side by side (S = 4 up to 2 tokens; 2 for 3-4 tokens, where 4 streams would not fit
// the 32 vector registers), each activation pair broadcast once for all S panels. Compact panels rebuild one stream's
// step at a time, so only their sums must stay in registers: they walk decode_read_pattern::compact_streams at 1-4
// tokens (measured in matmul_bf16.hpp). On Intel two streams read faster
// (decode_read_pattern_for in matmul_bf16.hpp). The panels are handed out on
// demand (guided): grains of up to 32 panels while much of the weight is left, so the streams stay long, shrinking to
// 8 (about 1 MiB at K = 2048) at the end, so a thread waits at most that long for another that was descheduled or
// reads slower. Batch-1 decode / probe in alternated runs: 77-95% with fixed grains of 8, 98-103% guided 8 to 32
// (4 to 16: 85-95%).
//
// Guided grains restart their streams at every grain: on the 2-vCPU Zen 4 VM's fast bandwidth state, runs of 128 KiB
// to 1 MiB read 4-13% less than runs that go on (a /tmp microbenchmark, 2026-12-01). So where the weights have owners
// (every serving path) each thread reads a home of its own as runs that continue across its grains (home_streams),
// grains of four steps (16 panels at batch 1), a thread done early taking the back half of another's rest. Alternated
// 4-step segments of batch-1 decode, TinyLlama shape, each against the probe read beside it: homes against guided
// grains 1.4-5.2% ahead in the fast state's rounds (44 of 60 pairs) and 1.3% in the slow one; with grains of one step
// 1.5% behind (per-grain costs), of two steps 1.1% ahead overall. The last eight steps of a home go a step a grain:
// a thread done with its home waited for the other's current grain of four steps (about 60 us of one thread's reads
// at batch 1) and could take over nothing of it. Alternated segments on the 2-vCPU Zen 5 VM (2026-12-02), against no
// tail: about 1% in a fast state (0.976-1.025, 51 of 90 pairs ahead), 3-5% in slower ones; a sixteen-step tail and
// grains of eight steps before the tail were no better (docs/cpu-speed-log.md).

constexpr int64_t streamed_max_tokens = 4;
constexpr int64_t streamed_min_grain = 8, streamed_max_grain = 32;  // panels (units)
constexpr int max_streams = 4;
static_assert(max_streams <= read_ahead_plan::max_streams);
// How much of what it reads first in the next call a waiting thread reads ahead: read_ahead_budget, its L2 and half its
// share of the L3, at most 4 MiB. More than its L2 holds, since on Zen the lines L2 evicts go to L3, from which the
// call reads them back far faster than from memory. In the VM's fast bandwidth state a worker that had read 512 KiB
// spent 1.0-1.6 ms of a 33 ms step waiting for the next call, and went to sleep 3-8 times a step; with 4 MiB, 0.25-0.55
// ms and once every 3-7 steps. Alternated 4-step segments of batch-1 decode (2026-12-01, 2-vCPU Zen 4 VM with 32 MiB of
// L3, TinyLlama shape, each against the probe read beside it), against 512 KiB: 1 MiB 1.003-1.006 in the fast state's
// rounds, 2 MiB 1.008-1.009, 4 MiB 1.009-1.019 (four runs, 164 of 232 pairs ahead; the slow state 1.008-1.018), 8 MiB
// 1.007-1.008.

// The pattern the streamed decode kernels follow: this CPU's, unless set_decode_read_pattern set another.
decode_read_pattern& pattern_in_use() {
  static decode_read_pattern pattern = decode_read_pattern_for(cpu_vendor(), cpu_family());
  return pattern;
}
// The side-by-side streams at n_tokens on plain or compact panels.
int streams_for(int64_t n_tokens, bool compact) {
  if (compact)
    return pattern_in_use().compact_streams;
  return n_tokens > 2 ? 2 : pattern_in_use().streams;
}

// Tiles t[0..S) (M token rows each, the same activations and K) walked side by side. Each step asks for the lines of
// a later step of each stream (this CPU's decode_read_pattern: on Intel 1 KiB ahead; on Zen the next step, 128 bytes
// ahead, into L1), and no further: the hardware prefetcher follows the S streams
// by itself, and distances of 512 bytes to 3 KiB, T0 or non-temporal, only got in its way (bench_cpu_decode, Zen 5
// VM, 2026-11-30: 91.0-98.4% of the probe with NTA 1 KiB ahead against 96.0-101.5% with none; T0 512 to 2,048 bytes
// 80-85% against 90%). One step ahead asks only for lines the next step's loads read (but two past each panel's end),
// and lets their misses start before those loads reach the front of the queue: in alternated segments of batch-1
// decode (2026-11-30, 2-vCPU Zen 4 VM, 8 rounds of 8 pairs, each segment against the probe read beside it) 89.1-95.3%
// against 84.4-90.5% without, in every round of the VM's fast bandwidth state, and the same or better in its slow
// one; the arena read as one call 2-8% faster (`bench_kernels`, fast state). Two steps ahead measured the same, four
// (512 bytes) as none. (The GEMM tiles of 5-48 tokens prefetch 1 KiB ahead: their panel is read again from L2 by each
// 12-row tile.)
template <int M, int S>
void stream_tiles(const gemm_tile_args* t) {
  __m512 acc0[S][M], acc1[S][M];
  for (int s = 0; s < S; ++s)
    for (int m = 0; m < M; ++m) {
      acc0[s][m] = _mm512_setzero_ps();
      acc1[s][m] = _mm512_setzero_ps();
    }
  const uint32_t* p[S];
  for (int s = 0; s < S; ++s)
    p[s] = t[s].panel;
  const int64_t n_kp = t[0].k_pad / 2;
  const int64_t ahead = pattern_in_use().prefetch_bytes / static_cast<int64_t>(sizeof(uint32_t));
  for (int64_t kp = 0; kp < n_kp; ++kp) {
    __m512bh b0[S], b1[S];
    for (int s = 0; s < S; ++s) {
      _mm_prefetch(reinterpret_cast<const char*>(p[s] + ahead), _MM_HINT_T0);  // a later step's two lines
      _mm_prefetch(reinterpret_cast<const char*>(p[s] + ahead + 16), _MM_HINT_T0);
      b0[s] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p[s]));
      b1[s] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p[s] + 16));
      p[s] += gemm_nr;
    }
    for (int m = 0; m < M; ++m) {
      const __m512bh av = broadcast_pair(t[0].a + m * t[0].lda + 2 * kp);
      for (int s = 0; s < S; ++s) {
        acc0[s][m] = _mm512_dpbf16_ps(acc0[s][m], av, b0[s]);
        acc1[s][m] = _mm512_dpbf16_ps(acc1[s][m], av, b1[s]);
      }
    }
  }
  for (int s = 0; s < S; ++s)
    store_tile<M>(t[s], acc0[s], acc1[s]);
}

#if defined(__AVX512VBMI__)
// Step `half` (0 or 1) of the compact block at `at`, rebuilt into b0 and b1, after asking for two lines of the block
// `ahead` bytes on: its codes and, over the two steps, both halves of its low bytes. `shift` is half * 4.
[[gnu::always_inline]] inline void stream_compact_values(const uint8_t* at, size_t ahead, int64_t half, __m128i shift,
                                                         __m512i table, __m512bh& b0, __m512bh& b1) {
  _mm_prefetch(reinterpret_cast<const char*>(at + ahead + 64 * half), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(at + ahead + 128), _MM_HINT_T0);
  const __m512i code = _mm512_srl_epi16(_mm512_loadu_si512(at + 128), shift);
  compact_values(code, _mm512_loadu_si512(at + 64 * half), table, b0, b1);
}

// One step (kp) of stream_compact_tiles for its S streams. `ahead`: how far ahead of a step's block its prefetches
// ask, in bytes (a whole number of blocks).
template <int M, int S>
[[gnu::always_inline]] inline void stream_compact_step(const gemm_tile_args* t, int64_t kp,
                                                       const uint8_t* const* blocks, const __m512i* table, size_t ahead,
                                                       __m512 (&acc0)[S][M], __m512 (&acc1)[S][M]) {
  const int64_t half = kp & 1;
  const size_t block = static_cast<size_t>(kp >> 1) * compact_block_bytes;
  const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(half) * 4);
  __m512bh av[M];
  for (int m = 0; m < M; ++m)
    av[m] = broadcast_pair(t[0].a + m * t[0].lda + 2 * kp);
  for (int s = 0; s < S; ++s) {
    __m512bh b0, b1;
    stream_compact_values(blocks[s] + block, ahead, half, shift, table[s], b0, b1);
    for (int m = 0; m < M; ++m) {
      acc0[s][m] = _mm512_dpbf16_ps(acc0[s][m], av[m], b0);
      acc1[s][m] = _mm512_dpbf16_ps(acc1[s][m], av[m], b1);
    }
  }
}

// stream_compact_step with the dot products on 256-bit halves of each rebuilt vector (vdpbf16ps ymm), into four
// 256-bit sums a stream and token row (outputs 0-7, 8-15, 16-23, 24-31). Each output lane's products and their order
// are the 512-bit kernel's, so the sums are the same bits. Walked at one token (walk_side_by_side).
template <int M, int S>
[[gnu::always_inline]] inline void stream_compact_step_narrow(const gemm_tile_args* t, int64_t kp,
                                                              const uint8_t* const* blocks, const __m512i* table,
                                                              size_t ahead, __m256 (&acc)[S][M][4]) {
  const int64_t half = kp & 1;
  const size_t block = static_cast<size_t>(kp >> 1) * compact_block_bytes;
  const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(half) * 4);
  __m256bh av[M];
  for (int m = 0; m < M; ++m)
    av[m] = reinterpret_cast<__m256bh>(_mm256_broadcastd_epi32(_mm_loadu_si32(t[0].a + m * t[0].lda + 2 * kp)));
  for (int s = 0; s < S; ++s) {
    __m512bh b0, b1;
    stream_compact_values(blocks[s] + block, ahead, half, shift, table[s], b0, b1);
    const __m256bh q[4] = {reinterpret_cast<__m256bh>(_mm512_castsi512_si256(reinterpret_cast<__m512i>(b0))),
                           reinterpret_cast<__m256bh>(_mm512_extracti64x4_epi64(reinterpret_cast<__m512i>(b0), 1)),
                           reinterpret_cast<__m256bh>(_mm512_castsi512_si256(reinterpret_cast<__m512i>(b1))),
                           reinterpret_cast<__m256bh>(_mm512_extracti64x4_epi64(reinterpret_cast<__m512i>(b1), 1))};
    for (int m = 0; m < M; ++m)
      for (int j = 0; j < 4; ++j)
        acc[s][m][j] = _mm256_dpbf16_ps(acc[s][m][j], av[m], q[j]);
  }
}

// stream_tiles on compact panels, from 96 bytes a step instead of 128; each panel's exceptions added at its end. Each
// step asks for two lines of a later block (its codes, and the low bytes of the step's half): the next on Zen 4, ten
// blocks (1,920 bytes) ahead on Zen 5, eleven blocks (2,112 bytes) ahead on Intel (decode_read_pattern). Narrow: the
// dot products on 256-bit vectors (decode_read_pattern::compact_narrow_dots).
template <int M, int S, bool Narrow>
void stream_compact_tiles(const gemm_tile_args* t) {
  __m512 acc0[S][M], acc1[S][M];
  const int64_t n_kp = t[0].k_pad / 2;
  const uint8_t* blocks[S];
  __m512i table[S];
  for (int s = 0; s < S; ++s) {
    blocks[s] = t[s].compact + compact_blocks_offset;
    table[s] = compact_table(t[s].compact);
  }
  const size_t ahead = static_cast<size_t>(pattern_in_use().compact_prefetch_blocks) * compact_block_bytes;
  if constexpr (Narrow) {
    __m256 acc[S][M][4];
    for (int s = 0; s < S; ++s)
      for (int m = 0; m < M; ++m)
        for (int j = 0; j < 4; ++j)
          acc[s][m][j] = _mm256_setzero_ps();
    for (int64_t kp = 0; kp < n_kp; ++kp)
      stream_compact_step_narrow<M, S>(t, kp, blocks, table, ahead, acc);
    for (int s = 0; s < S; ++s)
      for (int m = 0; m < M; ++m) {
        acc0[s][m] = _mm512_insertf32x8(_mm512_castps256_ps512(acc[s][m][0]), acc[s][m][1], 1);
        acc1[s][m] = _mm512_insertf32x8(_mm512_castps256_ps512(acc[s][m][2]), acc[s][m][3], 1);
      }
  } else {
    for (int s = 0; s < S; ++s)
      for (int m = 0; m < M; ++m) {
        acc0[s][m] = _mm512_setzero_ps();
        acc1[s][m] = _mm512_setzero_ps();
      }
    for (int64_t kp = 0; kp < n_kp; ++kp)
      stream_compact_step<M, S>(t, kp, blocks, table, ahead, acc0, acc1);
  }
  for (int s = 0; s < S; ++s) {
    add_compact_exceptions<M>(t[s].compact, t[0].k_pad, t[0].a, t[0].lda, acc0[s], acc1[s]);
    store_tile<M>(t[s], acc0[s], acc1[s]);
  }
}
#endif

using stream_fn = void (*)(const gemm_tile_args*);

// Entry (M - 1) * max_streams + (S - 1); M * 2 * S accumulators and 2 * S panel vectors must fit 32 registers, so the
// combinations that do not (M > 2 with S > 2) are never called on plain panels (compact ones: streams_for).
template <size_t... I>
constexpr std::array<stream_fn, sizeof...(I)> stream_fn_table(std::index_sequence<I...>) {
  return {&stream_tiles<static_cast<int>(I / max_streams) + 1, static_cast<int>(I % max_streams) + 1>...};
}

#if defined(__AVX512VBMI__)
template <size_t... I>
constexpr std::array<stream_fn, sizeof...(I)> stream_compact_fn_table(std::index_sequence<I...>) {
  return {
      &stream_compact_tiles<static_cast<int>(I / max_streams) + 1, static_cast<int>(I % max_streams) + 1, false>...};
}
// One token's, with 256-bit dots: entry S - 1.
template <size_t... I>
constexpr std::array<stream_fn, sizeof...(I)> stream_compact_narrow_fn_table(std::index_sequence<I...>) {
  return {&stream_compact_tiles<1, static_cast<int>(I) + 1, true>...};
}
#endif

// Walks `count` tiles of m token rows each (1 to max_streams, side by side) with stream_tiles, or
// stream_compact_tiles where they are compact (all or none).
void walk_side_by_side(const gemm_tile_args* tiles, int m, int count) {
  const auto entry = static_cast<size_t>((m - 1) * max_streams + (count - 1));
#if defined(__AVX512VBMI__)
  if (tiles[0].compact != nullptr) {
    // 256-bit dots at one token only (at two they read 0.86x the 512-bit ones' steps a second on a Xeon).
    static constexpr auto narrow_table = stream_compact_narrow_fn_table(std::make_index_sequence<max_streams>{});
    static constexpr auto compact_table =
        stream_compact_fn_table(std::make_index_sequence<streamed_max_tokens * max_streams>{});
    if (m == 1 && pattern_in_use().compact_narrow_dots)
      narrow_table[static_cast<size_t>(count - 1)](tiles);
    else
      compact_table[entry](tiles);
    return;
  }
#endif
  static constexpr auto table = stream_fn_table(std::make_index_sequence<streamed_max_tokens * max_streams>{});
  table[entry](tiles);
}

// Stream s of `streams` over n tiles starts at this tile: contiguous runs of near-equal length (they differ by at most
// one tile, so only the last step walks fewer streams).
int64_t stream_start(int64_t n, int streams, int s) { return n * s / streams; }

// Splits `tiles` into min(streams, tiles) runs (stream_start) and walks them side by side.
void run_streams(std::span<const gemm_tile_args> tiles, int m, int streams) {
  const int64_t n = static_cast<int64_t>(tiles.size());
  if (n == 0)
    return;
  streams = static_cast<int>(std::min<int64_t>(streams, n));
  const int64_t longest = (n + streams - 1) / streams;
  for (int64_t j = 0; j < longest; ++j) {
    gemm_tile_args group[max_streams];
    int count = 0;
    for (int s = 0; s < streams; ++s) {
      const int64_t begin = stream_start(n, streams, s), end = stream_start(n, streams, s + 1);
      if (begin + j < end)
        group[count++] = tiles[static_cast<size_t>(begin + j)];
    }
    walk_side_by_side(group, m, count);
  }
}

// Packed weights, 1 to streamed_max_tokens tokens: the units (panels, numbered across the targets) read as
// streams_for(n_tokens, compact) side-by-side panel streams into the computing thread's scratch, then committed to
// the outputs (the bias added). Where the weights have owners, each pool thread reads its home's
// units as runs that go on from one grain to the next (home_streams, thread_pool::home_split; a thread done with its
// home takes the back half of another's rest); without, guided grains of 8 to 32 units, each cut into its own runs. The
// work owns its rounded input and keeps the weights alive where the caller says how, so the pool can take a grain over
// from a thread the OS descheduled and return without it (thread_pool::parallel_for_takeover); on a shared machine such
// a thread held a decode step up for a time slice per kernel call.
class streamed_panel_work final : public takeover_work {
 public:
  streamed_panel_work(int64_t n_tokens, int64_t n_in, std::span<const target_view> targets)
      : units_(targets, false, gemm_nr) {
    std::copy(targets.begin(), targets.end(), targets_.begin());
    const int64_t k_pad = (n_in + k_step - 1) / k_step * k_step;
    const int64_t ld = k_pad + k_step;  // as matmul_bf16_dot lays its rows out
    xb_.resize(static_cast<size_t>(n_tokens * ld));
    c_ = gemv_call{xb_.data(), ld, k_pad, n_in, n_tokens};
  }

  /// Where the input goes, rounded to bf16: n_tokens rows of c().ld.
  uint16_t* input() { return xb_.data(); }
  const gemv_call& call() const { return c_; }
  int64_t n_units() const { return units_.total(); }
  /// Keeps a target's weight alive (matmul_target::owner).
  void keep_alive(std::shared_ptr<const void> owner) { owners_.push_back(std::move(owner)); }

  size_t scratch_floats(int64_t n_units) const override {
    return static_cast<size_t>(n_units) * static_cast<size_t>(c_.n_tokens) * gemm_nr;
  }

  void compute(int64_t u_begin, int64_t u_end, float* scratch) const noexcept override {
    std::array<gemm_tile_args, streamed_max_grain> tiles;
    const size_t n_tiles = grain_tiles(u_begin, u_end, scratch, tiles);
    const int m = static_cast<int>(c_.n_tokens);
    if (!homes_) {
      run_streams({tiles.data(), n_tiles}, m, streams());
      return;
    }
    // Items in home order: each step's units (one of each run) side by side.
    size_t first = 0, end = 0;
    for (int64_t item = u_begin; item < u_end; ++item) {
      ++end;
      if (item + 1 == u_end || homes_->starts_step(item + 1)) {
        walk_side_by_side(&tiles[first], m, static_cast<int>(end - first));
        first = end;
      }
    }
  }

  /// Panel streams read side by side (streams_for this call's token count and panel form).
  int streams() const { return streams_for(c_.n_tokens, targets_[0].compact); }

  /// Items in the order of home_streams over `n_homes` homes (thread_pool::home_split with home_grain() items a
  /// grain), instead of guided grains whose panels are read as streams_for(n_tokens, compact) runs each.
  void read_from_homes(int n_homes) { homes_ = home_streams::shared(n_units(), n_homes, streams()); }
  /// Items a grain of home_split: four steps of every run (one step a grain measured 1.5% slower: per-grain costs).
  int64_t home_grain() const { return 4 * streams(); }
  /// Items a grain in the last grain's worth of a home (home_tail_items): one step, so that a thread done with its
  /// home waits at most one step's reads for the grain the other thread is inside of.
  int64_t home_tail_grain() const { return streams(); }
  /// Items of a home cut into home_tail_grain() grains: one grain's worth. Each grain costs something (its claim, its
  /// tiles' set-up and commit, a moment with fewer reads in flight): on a 2-vCPU Xeon two grains' worth (eight
  /// one-step grains a home) read 0.4-1.5% fewer bytes a second in the decode step (bench_kernels, 6-8 rounds).
  int64_t home_tail_items() const { return home_grain(); }

  void idle(int thread_index, const std::function<bool()>& stop) const noexcept override {
    if (next_ != nullptr)
      read_ahead(*next_, thread_index, stop);
  }

  /// What this call's threads read first, for the call before it to read ahead (after read_from_homes): the start of
  /// each run of each thread's home, read_ahead_budget in all a thread (or each run's first read_ahead_plan::max_tiles
  /// panels); the weights' owners (as keep_alive got them) guard the reads.
  read_ahead_plan first_reads() const {
    if (!homes_)
      return {};
    read_ahead_plan plan =
        home_first_reads(*homes_, panel_bytes(), read_ahead_budget(cache_sizes::of_this_machine(), homes_->n_homes()),
                         [this](int64_t u) { return static_cast<const void*>(panel_of(u)); });
    plan.owners.assign(owners_.begin(), owners_.end());
    return plan;
  }

  /// Bytes of one unit (a panel).
  int64_t unit_bytes() const { return static_cast<int64_t>(panel_bytes()); }

  /// The call that came after this one last time (thread_pool's idle time reads its start ahead).
  void set_next(std::shared_ptr<const read_ahead_plan> next) { next_ = std::move(next); }

  void commit(int64_t u_begin, int64_t u_end, const float* scratch) const noexcept override {
    size_t i = 0;
    for (int64_t item = u_begin; item < u_end; ++item) {
      const int64_t u = unit_of(item);
      i = units_.target_of(u, homes_ ? 0 : i);
      const int64_t o0 = (u - units_.begin[i]) * gemm_nr;
      const target_view& tv = targets_[i];
      const int64_t n_valid = std::min<int64_t>(gemm_nr, tv.n_out - o0);
      const auto tile = static_cast<size_t>(item - u_begin);
      for (int64_t t = 0; t < c_.n_tokens; ++t)
        add_bias(scratch + tile_offset(tile) + static_cast<size_t>(t) * gemm_nr, tv, o0, n_valid,
                 tv.y + t * tv.n_out + o0);
    }
  }

 private:
  size_t panel_bytes() const { return targets_[0].panel_stride; }
  int64_t unit_of(int64_t item) const { return homes_ ? homes_->unit_of(item) : item; }
  const uint8_t* panel_of(int64_t u) const {
    const size_t i = units_.target_of(u, 0);
    return targets_[i].panel(u - units_.begin[i]);
  }

  // The tiles of units [u_begin, u_end), in the order compute() walks them, their sums to `scratch`.
  size_t grain_tiles(int64_t u_begin, int64_t u_end, float* scratch,
                     std::array<gemm_tile_args, streamed_max_grain>& tiles) const {
    size_t n_tiles = 0, i = 0;
    for (int64_t item = u_begin; item < u_end; ++item, ++n_tiles) {
      const int64_t u = unit_of(item);
      i = units_.target_of(u, homes_ ? 0 : i);  // home order visits the targets out of order
      const int64_t p = u - units_.begin[i];
      const target_view& tv = targets_[i];
      tiles[n_tiles] = {.a = c_.xb,
                        .lda = c_.ld,
                        .panel = reinterpret_cast<const uint32_t*>(tv.panel(p)),
                        .k_pad = c_.k_pad,
                        .y = scratch == nullptr ? nullptr : scratch + tile_offset(n_tiles),
                        .ldy = gemm_nr,
                        .n_valid = gemm_nr,  // the panel's rows past n_out are zeros
                        .bias = nullptr,     // added at commit
                        .compact = tv.compact ? tv.panel(p) : nullptr};
    }
    return n_tiles;
  }
  // Where a tile's n_tokens x 32 sums start in a grain's scratch (rows 32 apart).
  size_t tile_offset(size_t tile) const { return tile * static_cast<size_t>(c_.n_tokens) * gemm_nr; }

  // out[j] = sums[j] + tv's bias at output o0 + j, for j < n.
  static void add_bias(const float* sums, const target_view& tv, int64_t o0, int64_t n, float* out) {
    for (int64_t j = 0; j < n; ++j)
      out[j] = sums[j] + (tv.bias != nullptr ? tv.bias[o0 + j] : 0.0f);
  }

  std::array<target_view, 8> targets_{};
  unit_numbering units_;
  std::vector<uint16_t> xb_;
  gemv_call c_{};
  std::vector<std::shared_ptr<const void>> owners_;
  std::shared_ptr<const read_ahead_plan> next_;
  std::shared_ptr<const home_streams> homes_;  // null: guided grains
};

// Rounds x into the work's input and runs it: taken over from descheduled threads when every weight has an owner.
void streamed_panel_matmul(const float* x, int64_t n_tokens, int64_t n_in, std::span<const matmul_target> targets,
                           std::span<const target_view> views, thread_pool& pool) {
  auto work = std::make_shared<streamed_panel_work>(n_tokens, n_in, views);
  const gemv_call& c = work->call();
  round_rows(x, n_tokens, n_in, work->input(), c.k_pad, c.ld);
  bool owned = true;
  for (const matmul_target& t : targets) {
    owned = owned && t.owner != nullptr;
    work->keep_alive(t.owner);
  }
  const int64_t n_units = work->n_units();
  if (owned) {
    // The pool lets waiting threads read ahead (takeover_work::idle) on this path only. A guess that is wrong only
    // reads lines nobody uses; one that points at weights freed since reads nothing (the plan's owners).
    work->read_from_homes(pool.size());
    const read_ahead_key key{views[0].w, n_units, work->unit_bytes(), work->streams(), pool.size()};
    work->set_next(next_call_table::global().advance(key, [&] { return work->first_reads(); }));
    // The split before work is moved from.
    takeover_split split =
        pool.home_split(n_units, work->home_grain(), work->home_tail_grain(), work->home_tail_items());
    pool.parallel_for_takeover(std::move(split), std::move(work));
    return;
  }
  pool.parallel_for_guided(n_units, streamed_min_grain, streamed_max_grain, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> scratch;
    scratch.resize(work->scratch_floats(e - b));
    work->compute(b, e, scratch.data());
    work->commit(b, e, scratch.data());
  });
}

// The panel algorithm: work units are panels of 32 outputs, numbered across the targets (a gated unit is a gate panel
// and the up panel of the same outputs), handed out over the pool in grains that shrink as the call's units run out
// (parallel_for_guided; amx_max_grain_pairs, panel_max_grain_units). Each tile runs over all of K, so every output is
// written once: on Zen 4 this measured 410-435 GFLOP/s per two cores at 512 tokens (90-95% of vdpbf16ps peak) against
// 350 with GotoBLAS K blocks of 512 (tiles reloading their outputs per block), the panel (128-352 KiB) sitting in L2.
// Many tokens go in chunks of 384 rows, so a panel comes from memory once per chunk and serves 32 tiles. A row-major
// weight's panel is packed per call into a thread-local buffer; a packed weight (tensor_layout::cpu_bf16_panels) is
// read in place, and with few tokens (decode) each panel is streamed once with software prefetch ahead.
constexpr int64_t packed_stream_max_tokens = 48;
constexpr int64_t panel_tc = 384;

// y[t][j] = sums[t][j] (+ bias[j]) for t < n_rows, j < n_valid: a panel's sums (32 a row, as amx_panels_product
// makes them) committed to outputs ldy apart.
void commit_sums(const float* sums, int64_t n_rows, int64_t n_valid, const float* bias, float* y, int64_t ldy) {
  for (int64_t t = 0; t < n_rows; ++t)
    for (int64_t j = 0; j < n_valid; ++j)
      y[t * ldy + j] = sums[t * gemm_nr + j] + (bias != nullptr ? bias[j] : 0.0f);
}

// The panel algorithm on AMX tiles (amx_bf16.cpp): each thread's units in groups of amx_group_panels panels (a gated
// unit is two), each group's sums over a chunk of token rows made in scratch and then committed to the outputs with
// the bias (a gated pair combined). The token rows are padded to a multiple of 16 (matmul_bf16_dot pads xb).
constexpr int amx_group_panels = 4;
// The most token rows for which compact panels are rebuilt into L1 rather than expanded (amx_panel_matmul).
constexpr int64_t amx_rebuild_max_rows = 64;
// The most pairs of panels a grain of amx_panel_matmul holds (guided grains: left / (2 x threads), up to this many).
constexpr int64_t amx_max_grain_pairs = 8;

void amx_panel_matmul(const gemv_call& c, std::span<const target_view> targets, bool gated, thread_pool& pool) {
  const unit_numbering units(targets, gated, gemm_nr);
  const size_t per_unit = gated ? 2 : 1;
  const bool packed = targets[0].packed;
  const int64_t n_kp = c.k_pad / 2;
  const int64_t chunk = packed && c.n_tokens <= packed_stream_max_tokens ? c.n_tokens : panel_tc;
  const int64_t units_a_group = amx_group_panels / static_cast<int64_t>(per_unit);
  // Pairs of panels are handed out on demand (guided grains: long runs while much is left, then one pair at the end for
  // decode, one group for prefill), so that a thread done with its share waits at most that long for the other's last
  // grain. Eight near-equal chunks a call left it up to an eighth of the call to wait for: on the 2-vCPU Xeon (session
  // 54, bench_cpu_decode TinyLlama-1.1B shape, binaries alternated) batch 8 1.02-1.12x, 16 1.05x and 1.10x, 32 1.01x
  // and 1.10x, 5 1.02x; prefill 512 1.04-1.06x.
  const int64_t units_a_pair = 2 / static_cast<int64_t>(per_unit);
  const int64_t n_pairs = (units.total() + units_a_pair - 1) / units_a_pair;
  const int64_t min_grain_pairs = packed && c.n_tokens <= amx_rebuild_max_rows ? 1 : amx_group_panels / 2;
  pool.parallel_for_guided(n_pairs, min_grain_pairs, amx_max_grain_pairs, [&](int64_t pair_begin, int64_t pair_end) {
    const int64_t u_begin = pair_begin * units_a_pair, u_end = std::min(units.total(), pair_end * units_a_pair);
    thread_local std::vector<uint32_t> packed_panels;  // a group's plain panels, where they are packed or expanded here
    thread_local std::vector<float> sums;
    for (int64_t t0 = 0; t0 < c.n_tokens; t0 += chunk) {
      const int64_t tc = std::min(chunk, c.n_tokens - t0);
      const int64_t rows = (tc + 15) / 16 * 16;
      // Compact panels of batched decode are rebuilt into L1 as the tiles take them (a step of 16 pair rows up to 32
      // token rows, a K block of 128 pair rows up to 64); a whole plain copy written first made the writes the
      // bottleneck there (session 51; batch 40 and 64 1.30x and 1.16x, session 52). Prefill and larger batches, whose
      // 32-row blocks read the copy many times, still expand each group's panels (at 128 tokens 1.12x the rebuild).
      const bool rebuild_in_l1 = compact_kernels && packed && targets[0].compact && rows <= amx_rebuild_max_rows;
      if (!packed || (targets[0].compact && !rebuild_in_l1))
        packed_panels.resize(static_cast<size_t>(amx_group_panels * n_kp * gemm_nr));
      sums.resize(static_cast<size_t>(amx_group_panels * rows * gemm_nr));
      for (int64_t g0 = u_begin; g0 < u_end; g0 += units_a_group) {
        // The group's panels, each with the target and first output it commits to.
        const uint32_t* panels[amx_group_panels];
        const void* compact_panels[amx_group_panels];
        const target_view* panel_target[amx_group_panels];
        int64_t panel_o0[amx_group_panels];
        int n_panels = 0;
        size_t i = 0;
        for (int64_t u = g0; u < std::min(u_end, g0 + units_a_group); ++u) {
          i = units.target_of(u, i);
          const int64_t p = u - units.begin[i];
          for (size_t part = 0; part < per_unit; ++part, ++n_panels) {
            const target_view& tv = targets[gated ? part : i];
            if (rebuild_in_l1) {
              compact_panels[n_panels] = tv.panel(p);
            } else {  // packed_panels is sized for these
              uint32_t* buffer = packed_panels.data() + static_cast<size_t>(n_panels * n_kp * gemm_nr);
              if (packed) {
                panels[n_panels] = plain_panel(tv, p, c.k_pad, buffer);
              } else {
                pack_panel(tv.w, c.n_in, tv.n_out, p * gemm_nr, c.k_pad, buffer);
                panels[n_panels] = buffer;
              }
            }
            panel_target[n_panels] = &tv;
            panel_o0[n_panels] = p * gemm_nr;
          }
        }
        if (rebuild_in_l1)
          amx_rebuilt_panels_product(c.xb + t0 * c.ld, c.ld, tc, compact_panels, n_panels, c.k_pad, &compact_pair_rows,
                                     sums.data());
        else
          amx_panels_product(c.xb + t0 * c.ld, c.ld, rows, panels, n_panels, c.k_pad, sums.data());
        for (int k = 0; k < n_panels; ++k) {
          const target_view& tv = *panel_target[k];
          const int64_t o0 = panel_o0[k];
          commit_sums(sums.data() + static_cast<size_t>(k * rows * gemm_nr), tc,
                      std::min<int64_t>(gemm_nr, tv.n_out - o0), tv.bias != nullptr ? tv.bias + o0 : nullptr,
                      tv.y + t0 * tv.n_out + o0, tv.n_out);
          if (gated && k % 2 == 1)  // gate and up of these outputs both committed
            combine_gated(targets, o0, t0, t0 + tc);
        }
      }
    }
  });
}

// The first tile of a compact panel (gemm_tile_compact with m rows), which also rebuilds the panel into `plain` when
// other tiles follow (`keep`).
void run_compact_tile(const gemm_tile_args& args, int m, uint32_t* plain, bool keep) {
#if defined(__AVX512VBMI__)
  static constexpr auto keeping = gemm_compact_table<true>(std::make_index_sequence<compact_mr>{});
  static constexpr auto alone = gemm_compact_table<false>(std::make_index_sequence<compact_mr>{});
  (keep ? keeping : alone)[static_cast<size_t>(m - 1)](args, plain);
#else
  (void)args, (void)m, (void)plain, (void)keep;
  ACTORLLM_CHECK(false, "compact panels: this build has no compact-panel kernels (check_packed refuses them)");
#endif
}

// The most units a grain of panel_matmul holds (guided grains: left / (2 x threads), 1 to this many: a thread done with
// its share waits at most one unit's work for the other's last grain). Eight near-equal chunks a call before: on the
// 2-vCPU Xeon without its AMX (bench_kernels --compact-step-without-amx, binaries alternated) the batch-8 step read
// 1.05x and 1.11x the bytes a second on compact panels and 1.09x and 1.14x on plain ones, batch 16 1.04x and 1.14x,
// batch 32 1.05x.
constexpr int64_t panel_max_grain_units = 16;

void panel_matmul(const gemv_call& c, std::span<const target_view> targets, bool gated, thread_pool& pool) {
  if (use_amx()) {
    amx_panel_matmul(c, targets, gated, pool);
    return;
  }
  // Streaming panels from memory wants software prefetch; a panel that the chunk's tiles reuse from L2 does not.
  static constexpr auto stream_table = gemm_table<true, false>(std::make_index_sequence<gemm_mr>{});
  static constexpr auto chunk_table = gemm_table<false, false>(std::make_index_sequence<gemm_mr>{});
  // A compact panel's later tiles: its expanded steps, and its exceptions added.
  static constexpr auto expanded_table = gemm_table<false, compact_kernels>(std::make_index_sequence<gemm_mr>{});
  const unit_numbering units(targets, gated, gemm_nr);
  const size_t per_unit = gated ? 2 : 1;
  const bool packed = targets[0].packed;
  const int64_t n_kp = c.k_pad / 2;
  // A compact panel's first tile rebuilds it into L1/L2 as it streams it (gemm_tile_compact); the others read that.
  const bool compact = targets[0].compact;
  const bool stream = packed && !compact && c.n_tokens <= packed_stream_max_tokens;
  const int64_t chunk = stream ? c.n_tokens : panel_tc;
  const auto& table = stream ? stream_table : compact ? expanded_table : chunk_table;
  pool.parallel_for_guided(units.total(), 1, panel_max_grain_units, [&](int64_t u_begin, int64_t u_end) {
    thread_local std::vector<uint32_t> packed_panel;
    if (!packed || compact)
      packed_panel.resize(static_cast<size_t>(n_kp * gemm_nr));
    alignas(64) float bias_pad[gemm_nr];
    for (int64_t t0 = 0; t0 < c.n_tokens; t0 += chunk) {
      const int64_t tc = std::min(chunk, c.n_tokens - t0);
      size_t i = 0;
      for (int64_t u = u_begin; u < u_end; ++u) {
        i = units.target_of(u, i);
        const int64_t p = u - units.begin[i];
        const int64_t o0 = p * gemm_nr;
        for (size_t part = 0; part < per_unit; ++part) {
          const target_view& tv = targets[gated ? part : i];
          const int n_valid = static_cast<int>(std::min<int64_t>(gemm_nr, tv.n_out - o0));
          const uint32_t* panel = nullptr;
          if (compact) {
            panel = packed_panel.data();  // written by the first tile
          } else if (packed) {
            panel = reinterpret_cast<const uint32_t*>(tv.panel(p));
          } else {
            pack_panel(tv.w, c.n_in, tv.n_out, o0, c.k_pad, packed_panel.data());
            panel = packed_panel.data();
          }
          const float* tile_bias = padded_bias(tv, o0, n_valid, bias_pad);
          for (int64_t m0 = t0; m0 < t0 + tc;) {
            // A compact panel's first tile rebuilds it from memory in registers, and writes it out where other tiles
            // follow (at 8 tokens, writing it anyway cost 25%).
            const bool rebuild = compact && m0 == t0;
            const int mm = static_cast<int>(std::min<int64_t>(rebuild ? compact_mr : gemm_mr, t0 + tc - m0));
            gemm_tile_args args{c.xb + m0 * c.ld,          c.ld,     panel,   c.k_pad,
                                tv.y + m0 * tv.n_out + o0, tv.n_out, n_valid, tile_bias};
            if (rebuild) {
              args.compact = tv.panel(p);
              run_compact_tile(args, mm, packed_panel.data(), m0 + mm < t0 + tc);
            } else {
              if (compact)
                args.expanded_from = tv.panel(p);
              table[static_cast<size_t>(mm - 1)](args);
            }
            m0 += mm;
          }
        }
        if (gated)  // gate and up complete for this chunk: combine while warm
          combine_gated(targets, o0, t0, t0 + tc);
      }
    }
  });
}

}  // namespace

bool have_bf16_dot_kernels() { return true; }

bool have_compact_panel_kernels() { return compact_kernels; }

void expand_compact_panel(const uint8_t* panel, int64_t k_pad, uint32_t* plain) { expand_panel(panel, k_pad, plain); }

void round_rows_to_bf16(const float* x, int64_t n_tokens, int64_t n_in, uint16_t* xb, int64_t k_pad, int64_t ld) {
  round_rows(x, n_tokens, n_in, xb, k_pad, ld);
}

void pack_bf16_panel(const uint16_t* w, int64_t n_in, int64_t n_out, int64_t o0, int64_t k_pad, uint32_t* panel) {
  pack_panel(w, n_in, n_out, o0, k_pad, panel);
}

int64_t bf16_panel_rows(int64_t n_tokens) { return use_amx() ? (n_tokens + 15) / 16 * 16 : n_tokens; }

void bf16_panel_product(const uint16_t* xb, int64_t ld, int64_t n_tokens, const uint32_t* panel, int64_t k_pad,
                        float* y, int64_t ldy, int n_valid, const float* bias32) {
  if (use_amx()) {  // the same sums as matmul_bf16_dot's GEMMs on AMX
    const int64_t rows = bf16_panel_rows(n_tokens);
    thread_local std::vector<float> sums;
    sums.resize(static_cast<size_t>(rows * gemm_nr));
    amx_panels_product(xb, ld, rows, &panel, 1, k_pad, sums.data());
    commit_sums(sums.data(), n_tokens, n_valid, bias32, y, ldy);
    return;
  }
  static constexpr auto table = gemm_table<false, false>(std::make_index_sequence<gemm_mr>{});
  for (int64_t m0 = 0; m0 < n_tokens; m0 += gemm_mr) {
    const int mm = static_cast<int>(std::min<int64_t>(gemm_mr, n_tokens - m0));
    const gemm_tile_args args{xb + m0 * ld, ld, panel, k_pad, y + m0 * ldy, ldy, n_valid, bias32};
    table[static_cast<size_t>(mm - 1)](args);
  }
}

void set_decode_read_pattern(std::optional<decode_read_pattern> pattern) {
  pattern_in_use() = pattern.value_or(decode_read_pattern_for(cpu_vendor(), cpu_family()));
}

decode_read_pattern decode_read_pattern_in_use() { return pattern_in_use(); }

void matmul_bf16_dot(const float* x, int64_t n_tokens, int64_t n_in, std::span<const matmul_target> targets, bool gated,
                     thread_pool& pool, matmul_path path) {
  ACTORLLM_CHECK(!targets.empty() && targets.size() <= 8, "matmul_bf16_dot: 1 to 8 targets");
  ACTORLLM_CHECK(!gated || (targets.size() == 2 && targets[0].n_out == targets[1].n_out),
                 "matmul_bf16_dot: a gated group is a gate and an up target of equal size");
  std::array<target_view, 8> views{};
  for (size_t i = 0; i < targets.size(); ++i) {
    ACTORLLM_CHECK(targets[i].wtype == dtype::bf16, "matmul_bf16_dot: bf16 weights only");
    ACTORLLM_CHECK(targets[i].packed == targets[0].packed, "matmul_bf16_dot: packed and row-major weights mixed");
    ACTORLLM_CHECK(targets[i].compact == targets[0].compact && (!targets[i].compact || targets[i].packed),
                   "matmul_bf16_dot: compact and plain panels mixed");
    const int64_t k_pad = (n_in + k_step - 1) / k_step * k_step;
    views[i] = target_view{static_cast<const uint16_t*>(targets[i].w),
                           targets[i].n_out,
                           targets[i].bias,
                           targets[i].y,
                           targets[i].packed,
                           targets[i].compact,
                           targets[i].compact ? compact_panel_stride(targets[i].w)
                                              : static_cast<size_t>(k_pad) * gemm_nr * sizeof(uint16_t)};
  }
  const std::span<const target_view> tv{views.data(), targets.size()};
  if (targets[0].packed && n_tokens <= streamed_max_tokens) {
    // A gated pair (SwiGLU's gate and up) is read as two targets, each thread's panel streams runs of one weight as in
    // every other call, and combined after the call (each panel's outputs as the gated commit did, so the same bits).
    // Read as gated units (a thread's two streams a gate panel and the up panel of the same outputs), the TinyLlama
    // shape's gate/up call took 1.05-1.08x as long: bench_kernels --compact-step-profile on a 2-vCPU Xeon (2026-12-07)
    // 22.5-22.9 ms a step against 20.7-21.8 ms apart, the step's compact/plain ratio 1.27-1.30x against 1.32-1.34x;
    // in the engine (bench_cpu_decode, 4 alternated pairs) the call 1012 us against 1041 us and batch 1 1.016x.
    streamed_panel_matmul(x, n_tokens, n_in, targets, tv, pool);
    if (gated)
      for (int64_t o0 = 0; o0 < tv[0].n_out; o0 += gemm_nr)
        combine_gated(tv, o0, 0, n_tokens);
    return;
  }
  const int64_t k_pad = (n_in + k_step - 1) / k_step * k_step;
  // One extra line per row: rows a multiple of 4 KiB apart (n_in 2048, 4096, ...) would all fall into the same L1
  // sets, and the GEMM tile reads 12 of them at once.
  const int64_t ld = k_pad + k_step;
  thread_local std::vector<uint16_t> xb_storage;
  // AMX tiles read token rows 16 at a time: the rows past n_tokens are there (zeros), their sums never committed.
  const int64_t padded_tokens = bf16_panel_rows(n_tokens);
  xb_storage.resize(static_cast<size_t>(padded_tokens * ld));
  std::fill(xb_storage.begin() + n_tokens * ld, xb_storage.end(), uint16_t{0});
  // Rounded on the pool for a prefill's many rows (serial, it would leave the other cores idle for a while).
  uint16_t* xb = xb_storage.data();
  if (n_tokens >= 16 && pool.size() > 1)
    pool.parallel_for(n_tokens,
                      [&](int64_t b, int64_t e) { round_rows(x + b * n_in, e - b, n_in, xb + b * ld, k_pad, ld); });
  else
    round_rows(x, n_tokens, n_in, xb, k_pad, ld);
  const gemv_call c{xb_storage.data(), ld, k_pad, n_in, n_tokens};
  if (targets[0].packed) {
    panel_matmul(c, tv, gated, pool);
    return;
  }
  // Row-major weights: the GEMV's 4 x 4 dot tiles beat packing panels per call up to a few hundred tokens
  // (bench_kernels' crossover rows on Zen 4: 368 against 302 GFLOP/s at 256 tokens).
  if (path == matmul_path::automatic)
    path = n_tokens < bf16_dot_gemm_min_tokens ? matmul_path::gemv : matmul_path::gemm;
  if (path == matmul_path::gemv)
    gemv(c, tv, gated, pool);
  else
    panel_matmul(c, tv, gated, pool);
}

#else

// No streamed decode kernels in this build: nothing follows a pattern.
void set_decode_read_pattern(std::optional<decode_read_pattern>) {}

decode_read_pattern decode_read_pattern_in_use() {
  static const decode_read_pattern pattern = decode_read_pattern_for(cpu_vendor(), cpu_family());
  return pattern;
}

bool have_bf16_dot_kernels() { return false; }

bool have_compact_panel_kernels() { return false; }

void expand_compact_panel(const uint8_t* panel, int64_t k_pad, uint32_t* plain) {
  expand_compact_panel_reference(panel, k_pad, plain);
}

void matmul_bf16_dot(const float*, int64_t, int64_t, std::span<const matmul_target>, bool, thread_pool&, matmul_path) {
  ACTORLLM_CHECK(false, "matmul_bf16_dot: this build has no AVX512-BF16 kernels");
}

void round_rows_to_bf16(const float*, int64_t, int64_t, uint16_t*, int64_t, int64_t) {
  ACTORLLM_CHECK(false, "round_rows_to_bf16: this build has no AVX512-BF16 kernels");
}

void pack_bf16_panel(const uint16_t*, int64_t, int64_t, int64_t, int64_t, uint32_t*) {
  ACTORLLM_CHECK(false, "pack_bf16_panel: this build has no AVX512-BF16 kernels");
}

int64_t bf16_panel_rows(int64_t n_tokens) { return n_tokens; }

void bf16_panel_product(const uint16_t*, int64_t, int64_t, const uint32_t*, int64_t, float*, int64_t, int,
                        const float*) {
  ACTORLLM_CHECK(false, "bf16_panel_product: this build has no AVX512-BF16 kernels");
}

#endif

}  // namespace actorllm::cpu
