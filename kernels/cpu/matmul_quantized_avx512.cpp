// Quantized Linear weights on AVX-512 (with AVX512-VNNI, and AVX512-BF16 for the prefill tiles).
//
// Weight-only (4- and 8-bit codes):
// - GEMV (few tokens): each row's codes are streamed once per tile of tokens and unpacked to 16-bit lanes, one shift
//   and one mask per 32 codes (quantized_panels lays them out for that), and multiplied with the token rows on their
//   16-bit activation grid by vpdpwssd: exact int32 sums, 32 products per instruction. vdpbf16ps (bf16 x against
//   bf16 128 + code, made by or-ing 0x4300 into each nibble) would keep x in bf16, but on this project's Xeon
//   (Sapphire Rapids, in a VM) it measured about 2 cycles per instruction and the same kernel on vpdpwssd ran 1.5x
//   (int4) to 2-3x (int8) faster. Each segment (a group's part of a 128-input block) is converted to f32 once, times
//   its group's scale; each block's sum times its step; the zero points come off per row at the end, vectorized over
//   groups (scale * zero * the group's sum of x). Tiles of 2 rows x 2 to 4 tokens read consecutive rows, prefetched
//   along (512 bytes ahead) and one tile ahead (the next tile's rows, into L2): a 4-bit row of 2048 inputs is only
//   1 KiB. One token: tiles of 4 rows, each the next row of one of four streams walked side by side (walk_streams),
//   with no software prefetch; 4-bit codes in whole-block groups go on vpdpbusd against the grid's high and low
//   bytes (grid_bytes), 64 products an instruction. Both give the same exact lane sums as the multi-token tiles, so
//   a token's result does not depend on how many tokens share the call.
// - GEMM (many tokens): 32 rows are dequantized to bf16 ((code - zero) * scale, rounded once, as dequantize_to_bf16
//   does) into a panel in cache and run on the bf16 weights' 12 x 32 register tiles (matmul_bf16) with x rounded to
//   bf16, so the result is bit-identical to the packed bf16 weight's.
// W8A8 (int8 per-token activations, signed 8-bit codes): vpdpbusd multiplies 64 pairs per instruction, activations
// + 128 (unsigned) against signed codes; 128 * the group's code sum (precomputed) is taken off the exact int32 sum.
// Tiles of 4 rows x up to 4 tokens serve every batch size (token rows in chunks that stay in L2; one token reads four
// row streams, as the weight-only GEMV); the float epilogue is w8a8_combine's, step for step.
#include "kernels/cpu/matmul_quantized_avx512.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "kernels/cpu/simd.hpp"
#include "util/check.hpp"

namespace actorllm::cpu {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__) && defined(__AVX512VNNI__)

namespace {

constexpr int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

constexpr int tile_rows = 4;  // weight rows per tile (row streams)
// One token's tiles with stream_prefetch on: each row stream's scales and zero points (or W8A8's code sums) are
// arrays of their own, a line or less a row (16 groups of 128 inputs: 64 bytes of scales, 16 of zero points), which
// the hardware prefetchers did not cover: on a 2-vCPU Xeon with AMX (2026-12-07) the zero points' load held 6% of the
// int4 tile's samples. Each tile asks for the lines of its streams' row after next (bench_cpu_decode --variants
// bf16,int4,int8, alternated, one process per distance: int4 2.11-2.18x bf16's batch 1 at two rows ahead, 1.98-2.00x
// at four, 1.92-1.93x without; int8 1.21x, 1.07-1.17x, 1.08-1.11x).
constexpr int64_t stream_side_rows_ahead = 2;
// The bytes ahead along each row stream that a call of n_tokens asks for (wo_input / w8_input::stream_prefetch): the
// CPU's decode_read_pattern for one token (the streamed tiles), none otherwise (consecutive rows, prefetch_bytes).
int64_t stream_prefetch_for(int64_t n_tokens) {
  return n_tokens == 1 ? decode_read_pattern_in_use().quantized_prefetch_bytes : 0;
}
constexpr size_t prefetch_bytes = 512;              // software prefetch distance along each row, as the bf16 GEMV
constexpr int64_t block_inputs = activation_block;  // weight-only: inputs per block (64 bytes of 4-bit codes)

// Rows [row0, row0 + tile_rows) of a weight, the last ones repeating its last row when it has fewer: their results
// are computed and dropped, so every tile runs at full width.
inline int64_t tile_row(int64_t row0, int r, int64_t n_out) { return std::min<int64_t>(row0 + r, n_out - 1); }

// ---------------------------------------------------------------------------------------------------------------
// Weight-only GEMV

struct wo_input {
  const int16_t* q;  // token rows on the activation grid, ld apart, zero from n_in to k_pad
  int64_t ld;
  const float* steps;  // [n_tokens][n_blocks]: the grid step of each block
  int64_t n_blocks;
  const uint8_t* bytes = nullptr;  // one token: its grid values as bytes in 4-bit code order (grid_bytes), or null
  int64_t stream_prefetch = 0;     // one token: bytes ahead along each row stream to ask for (0: none)
};

// One token's grid values q [n_blocks * 128] split into bytes for vpdpbusd against 4-bit codes, 256 per block: the
// high bytes (q >> 8, signed) in the order of the block's low nibbles, then in the order of its high nibbles, then
// the low bytes (q & 0xff, unsigned) in the same two orders. Byte j of a block's 64-byte load of codes holds the
// codes of inputs 64 (j % 2) + j / 2 (low nibble) and 32 + 64 (j % 2) + j / 2 (high nibble): word m's nibbles are
// chunks 0..3 (quantized_panels), so a low-nibble vector interleaves chunks 0 and 2 byte by byte, a high-nibble one
// chunks 1 and 3. q = 256 hi + lo exactly, so sum(code * q) = 256 sum(code * hi) + sum(lo * code), both exact in
// int32 and vpdpbusd's operand signs (unsigned x signed): codes x hi, lo x codes.
void grid_bytes(const int16_t* q, int64_t n_blocks, uint8_t* out) {
  const __m512i low_byte = _mm512_set1_epi16(0x00ff), high_byte = _mm512_set1_epi16(static_cast<int16_t>(0xff00));
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int16_t* x = q + b * block_inputs;
    __m512i c[4];
    for (int i = 0; i < 4; ++i)
      c[i] = _mm512_loadu_si512(x + 32 * i);
    uint8_t* o = out + b * 256;
    for (int h = 0; h < 2; ++h) {                 // low nibbles: chunks 0 and 2; high nibbles: chunks 1 and 3
      const __m512i even = c[h], odd = c[h + 2];  // word m: byte 0 from `even`, byte 1 from `odd`
      const __m512i hi = _mm512_or_si512(_mm512_srli_epi16(even, 8), _mm512_and_si512(odd, high_byte));
      const __m512i lo = _mm512_or_si512(_mm512_and_si512(even, low_byte), _mm512_slli_epi16(odd, 8));
      _mm512_storeu_si512(o + 64 * h, hi);
      _mm512_storeu_si512(o + 128 + 64 * h, lo);
    }
  }
}

// How a weight's groups fall on its 32-input chunks.
enum wo_mode : int {
  wo_generic = 0,  // groups of a multiple of 32 inputs not listed below: a chunk counter
  wo_g32 = 1,      // one chunk per group
  wo_g64 = 2,      // two chunks per group
  wo_blocks = 3,   // whole 128-input blocks per group (multiples of 128; one group per row)
};

struct wo_view {
  const quantized_panels* w;
  const float* bias;
  float* y;
  const float* sums;  // [n_tokens][n_groups]: the sum of the grid values over each group
  wo_mode mode;
  int64_t per_group;  // chunks per group (wo_generic) or blocks per group (wo_blocks)
};

// Chunk C (32 inputs) of a block as 16-bit codes. 4-bit: nibble C of each word of the block's one 64-byte load;
// 8-bit: the low (even C) or high (odd C) bytes of the words of load C / 2.
template <int Bits, int C>
inline __m512i chunk_codes(const __m512i (&loads)[2]) {
  if constexpr (Bits == 8) {
    const __m512i v = loads[C / 2];
    return C % 2 == 0 ? _mm512_and_si512(v, _mm512_set1_epi16(0x00ff)) : _mm512_srli_epi16(v, 8);
  } else {
    const __m512i v = loads[0];
    if constexpr (C == 3)
      return _mm512_srli_epi16(v, 12);
    const __m512i s = C == 0 ? v : _mm512_srli_epi16(v, 4 * C);
    return _mm512_and_si512(s, _mm512_set1_epi16(0x000f));
  }
}

// The weight rows of one tile: row o[r] of weight w[r]. Every weight of a tile has v's format (bits, group size,
// n_in), so that v's geometry, mode and group sums serve them all.
struct tile_row_refs {
  std::array<const quantized_panels*, tile_rows> w{};
  std::array<int64_t, tile_rows> o{};
};

// R consecutive rows of w from row0, the last ones repeating w's last row when it has fewer.
tile_row_refs consecutive_rows(const quantized_panels& w, int64_t row0) {
  tile_row_refs refs;
  for (int r = 0; r < tile_rows; ++r) {
    refs.w[static_cast<size_t>(r)] = &w;
    refs.o[static_cast<size_t>(r)] = tile_row(row0, r, w.n_out());
  }
  return refs;
}

// One token reads a weight's rows as several streams walked side by side, a tile taking the next row of each: the
// range [r0, r1) cut into `streams` runs of near-equal length, visit(o, valid) called once per tile with o[s] the next
// row of run s (a row that exists, repeated once a shorter run is done, where valid[s] is false). A weight read as one
// run of consecutive rows measured 11-14 GB/s on one core of the 2-vCPU Zen 5 VM and as four streams 17 (int4 g128,
// 28.5 against 21.5 GB/s on two cores; bench_quantized_matmul, 2048 x 2048 copies past the caches): the rows are short
// (1 KiB at 2048 4-bit inputs), and one stream gives the hardware prefetchers too little to run ahead on while the
// unpacking keeps the core busy.
template <int Streams, class Visit>
void walk_streams(int64_t r0, int64_t r1, Visit&& visit) {
  const int64_t run = (r1 - r0 + Streams - 1) / Streams;
  std::array<int64_t, Streams> o{};
  std::array<bool, Streams> valid{};
  for (int64_t j = 0; j < run; ++j) {
    for (size_t s = 0; s < Streams; ++s) {
      const int64_t row = r0 + static_cast<int64_t>(s) * run + j;
      valid[s] = row < r1;
      o[s] = valid[s] ? row : r0 + j;
    }
    visit(o, valid);
  }
}

// out[t][r] = the product of token t0 + t with tile row r, without bias, for R rows and T tokens. Per (row, token)
// three accumulators: the exact int32 sum of the current segment (a group's part of one 128-input block), the block's
// sum of segments times their group's scale, and the running f32 sum of blocks times their step.
// With one token, the odd chunks of a segment go to a second accumulator: vpdpwssd's latency (5 to 6 cycles) would
// otherwise bound a block's four dependent instructions per row.
// Software prefetch: a multi-token tile reads consecutive rows, each 512 bytes ahead along the row and the same line
// one tile ahead (into L2). A one-token tile reads rows far apart (stream_gemv), each the next row of its own stream
// (a run of consecutive rows, so the bytes ahead along a row run on into the stream's next row), and asks
// in.stream_prefetch bytes ahead, the CPU's decode_read_pattern: on Zen 5 none (the hardware's stream prefetchers
// follow four streams per core on their own, and software prefetches on top measured 5-15% slower), on Intel 1 KiB
// (its L2 streamer stops at every 4 KiB page, four rows of 2,048 4-bit inputs).
template <int R, int T, int Bits, int Mode>
void wo_tile(const wo_input& in, const wo_view& v, const tile_row_refs& refs, int64_t t0, float (*out)[tile_rows]) {
  constexpr int loads_per_block = Bits == 8 ? 2 : 1;
  constexpr bool stream = R == tile_rows && T == 1;  // stream_gemv's one-token tile; the others read consecutive rows
  constexpr bool prefetch = !stream;
  // One token against 4-bit codes in whole blocks per segment: vpdpbusd on the grid's bytes (grid_bytes), 64
  // products an instruction where vpdpwssd takes 32, and one unpacking per nibble half instead of one per chunk. A
  // lane sums the same eight inputs of the block as vpdpwssd's lane on the chunks does (inputs 2i, 2i + 1 of each
  // chunk), so every lane's exact sum, and so the result, is the same. (Groups of 32 or 64 end inside a block, where
  // a byte lane would mix two groups' inputs: those keep vpdpwssd.)
  constexpr bool byte_dots = stream && Bits == 4 && Mode == wo_blocks;
  constexpr bool split = T == 1 && Mode != wo_g32 && !byte_dots;
  const quantized_panels& w = *v.w;
  const int64_t ng = w.n_groups(), n_in = w.n_in();
  const uint8_t* rows[R];
  const float* scales[R];
  const uint8_t* zeros[R];
  for (int r = 0; r < R; ++r) {
    const quantized_panels& wr = *refs.w[static_cast<size_t>(r)];
    const int64_t o = refs.o[static_cast<size_t>(r)];
    rows[r] = wr.row_codes(o);
    scales[r] = wr.row_scales(o);
    zeros[r] = wr.row_zeros(o);
    if (stream && in.stream_prefetch > 0) {  // the stream's row after next: its scales and zero points, a line each
      _mm_prefetch(reinterpret_cast<const char*>(scales[r] + stream_side_rows_ahead * ng), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(zeros[r] + stream_side_rows_ahead * ng), _MM_HINT_T0);
    }
  }
  const int16_t* xs[T];
  const float* steps[T];
  for (int t = 0; t < T; ++t) {
    xs[t] = in.q + (t0 + t) * in.ld;
    steps[t] = in.steps + (t0 + t) * in.n_blocks;
  }
  __m512i seg[R][T], seg_odd[R][T];
  __m512 block[R][T], run[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      seg[r][t] = _mm512_setzero_si512();
      seg_odd[r][t] = _mm512_setzero_si512();
      block[r][t] = _mm512_setzero_ps();
      run[r][t] = _mm512_setzero_ps();
    }
  const int64_t n_blocks = w.k_pad() / block_inputs;
  // Chunks of the last block that hold inputs (the rest is padding, skipped: it belongs to no group).
  const int last_chunks = static_cast<int>((n_in - (n_blocks - 1) * block_inputs + 31) / 32);
  int64_t g = 0, left = v.per_group;
  // Rows are short (1 KiB for 2048 4-bit inputs) next to the in-row prefetch distance, so each line is also asked for
  // one tile ahead (the same offset in the rows after this tile's), into L2.
  const auto next_tile = static_cast<ptrdiff_t>(R * w.row_bytes());

  // The segment's exact sum, converted once, times its group's scale.
  auto end_segment = [&]() __attribute__((always_inline)) {
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_set1_ps(scales[r][g]);
      for (int t = 0; t < T; ++t) {
        const __m512i sum = split ? _mm512_add_epi32(seg[r][t], seg_odd[r][t]) : seg[r][t];
        block[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), s, block[r][t]);
        seg[r][t] = _mm512_setzero_si512();
        if constexpr (split)
          seg_odd[r][t] = _mm512_setzero_si512();
      }
    }
  };
  // The block's sum times the token's step for it.
  auto end_block = [&](int64_t b) __attribute__((always_inline)) {
    for (int t = 0; t < T; ++t) {
      const __m512 step = _mm512_set1_ps(steps[t][b]);
      for (int r = 0; r < R; ++r) {
        run[r][t] = _mm512_fmadd_ps(block[r][t], step, run[r][t]);
        block[r][t] = _mm512_setzero_ps();
      }
    }
  };
  auto chunk = [&](auto c_const, const __m512i(&loads)[R][2], int64_t b) __attribute__((always_inline)) {
    constexpr int C = decltype(c_const)::value;
    const int64_t k = b * block_inputs + 32 * C;
    __m512i xv[T];
    for (int t = 0; t < T; ++t)
      xv[t] = _mm512_loadu_si512(xs[t] + k);
    for (int r = 0; r < R; ++r) {
      const __m512i codes = chunk_codes<Bits, C>(loads[r]);
      for (int t = 0; t < T; ++t) {
        if (split && C % 2 == 1)
          seg_odd[r][t] = _mm512_dpwssd_epi32(seg_odd[r][t], codes, xv[t]);
        else
          seg[r][t] = _mm512_dpwssd_epi32(seg[r][t], codes, xv[t]);
      }
    }
    if constexpr (Mode == wo_g32) {
      end_segment();
      ++g;
    } else if constexpr (Mode == wo_g64) {
      if constexpr (C % 2 == 1) {
        end_segment();
        ++g;
      }
    } else if constexpr (Mode == wo_generic) {
      if (--left == 0) {
        end_segment();
        ++g;
        left = v.per_group;
      }
    }
  };

  for (int64_t b = 0; b < n_blocks; ++b) {
    if constexpr (byte_dots) {
      // Padding past n_in is zero codes against zero grid values: whole blocks, no chunk count.
      const uint8_t* xb = in.bytes + b * 256;
      const __m512i hi_low = _mm512_loadu_si512(xb), hi_high = _mm512_loadu_si512(xb + 64);
      const __m512i lo_low = _mm512_loadu_si512(xb + 128), lo_high = _mm512_loadu_si512(xb + 192);
      const __m512i nibble = _mm512_set1_epi8(0x0f);
      for (int r = 0; r < R; ++r) {
        if (in.stream_prefetch > 0)
          _mm_prefetch(reinterpret_cast<const char*>(rows[r] + b * 64) + in.stream_prefetch, _MM_HINT_T0);
        const __m512i codes = _mm512_loadu_si512(rows[r] + b * 64);
        const __m512i low = _mm512_and_si512(codes, nibble);
        const __m512i high = _mm512_and_si512(_mm512_srli_epi16(codes, 4), nibble);
        __m512i h = _mm512_dpbusd_epi32(_mm512_setzero_si512(), low, hi_low);
        h = _mm512_dpbusd_epi32(h, high, hi_high);
        __m512i l = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo_low, low);
        l = _mm512_dpbusd_epi32(l, lo_high, high);
        seg[r][0] = _mm512_add_epi32(_mm512_slli_epi32(h, 8), l);  // end_segment left it zero
      }
      end_segment();
      if (--left == 0 || b + 1 == n_blocks) {
        ++g;
        left = v.per_group;
      }
      end_block(b);
      continue;
    }
    __m512i loads[R][2];
    for (int r = 0; r < R; ++r)
      for (int l = 0; l < loads_per_block; ++l) {
        const uint8_t* src = rows[r] + (b * loads_per_block + l) * 64;
        if constexpr (prefetch) {
          _mm_prefetch(reinterpret_cast<const char*>(src) + prefetch_bytes, _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(src) + next_tile, _MM_HINT_T1);
        } else if (in.stream_prefetch > 0) {
          _mm_prefetch(reinterpret_cast<const char*>(src) + in.stream_prefetch, _MM_HINT_T0);
        }
        loads[r][l] = _mm512_loadu_si512(src);
      }
    const int n_chunks = b + 1 < n_blocks ? 4 : last_chunks;
    chunk(std::integral_constant<int, 0>{}, loads, b);
    if (n_chunks > 1)
      chunk(std::integral_constant<int, 1>{}, loads, b);
    if (n_chunks > 2)
      chunk(std::integral_constant<int, 2>{}, loads, b);
    if (n_chunks > 3)
      chunk(std::integral_constant<int, 3>{}, loads, b);
    if constexpr (Mode == wo_blocks) {
      end_segment();
      if (--left == 0 || b + 1 == n_blocks) {
        ++g;
        left = v.per_group;
      }
    } else if constexpr (Mode == wo_generic) {
      if (left != v.per_group)
        end_segment();  // the group goes on into the next block, which has a step of its own
    }
    end_block(b);
  }

  // The zero points: sum over groups of scale * zero * (the group's sum of grid values), vectorized over groups.
  for (int r = 0; r < R; ++r) {
    __m512 corr[T];
    for (int t = 0; t < T; ++t)
      corr[t] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < ng; g0 += 16) {
      const __mmask16 m = ng - g0 >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (ng - g0)) - 1);
      const __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, zeros[r] + g0)));
      const __m512 coef = _mm512_mul_ps(z, _mm512_maskz_loadu_ps(m, scales[r] + g0));
      for (int t = 0; t < T; ++t)
        corr[t] = _mm512_fmadd_ps(coef, _mm512_maskz_loadu_ps(m, v.sums + (t0 + t) * ng + g0), corr[t]);
    }
    for (int t = 0; t < T; ++t)
      out[t][r] = _mm512_reduce_add_ps(run[r][t]) - _mm512_reduce_add_ps(corr[t]);
  }
}

using wo_tile_fn = void (*)(const wo_input&, const wo_view&, const tile_row_refs&, int64_t, float (*)[tile_rows]);

// One token: tiles of 4 rows (four row streams). More tokens: tiles of 2 rows x up to 4 tokens, so that each row's
// codes, unpacked once, serve 4 tokens (24 accumulators in registers).
constexpr int wo_multi_rows = 2;
constexpr int wo_max_tokens = 4;

template <int Bits, int Mode, size_t... I>
constexpr std::array<wo_tile_fn, sizeof...(I) + 1> wo_tiles(std::index_sequence<I...>) {
  return {&wo_tile<tile_rows, 1, Bits, Mode>, &wo_tile<wo_multi_rows, static_cast<int>(I) + 1, Bits, Mode>...};
}

// Index 0: the one-token tile of 4 rows; index t (1..wo_max_tokens): 2 rows x t tokens.
template <int Bits>
wo_tile_fn wo_tile_for_bits(wo_mode mode, size_t index) {
  static constexpr auto generic = wo_tiles<Bits, wo_generic>(std::make_index_sequence<wo_max_tokens>{});
  static constexpr auto g32 = wo_tiles<Bits, wo_g32>(std::make_index_sequence<wo_max_tokens>{});
  static constexpr auto g64 = wo_tiles<Bits, wo_g64>(std::make_index_sequence<wo_max_tokens>{});
  static constexpr auto blocks = wo_tiles<Bits, wo_blocks>(std::make_index_sequence<wo_max_tokens>{});
  switch (mode) {
    case wo_generic:
      return generic[index];
    case wo_g32:
      return g32[index];
    case wo_g64:
      return g64[index];
    case wo_blocks:
      return blocks[index];
  }
  return nullptr;
}

wo_tile_fn wo_tile_for(const wo_view& v, size_t index) {
  return v.w->bits() == 8 ? wo_tile_for_bits<8>(v.mode, index) : wo_tile_for_bits<4>(v.mode, index);
}

// Whether w's groups are whole 128-input blocks (or one per row), set_mode's wo_blocks.
bool byte_dots_mode(const quantized_panels& w) {
  return w.group_size() % block_inputs == 0 || w.group_size() == w.n_in();
}

// The mode and the count it needs for w.
void set_mode(wo_view& v) {
  const quantized_panels& w = *v.w;
  const int64_t gs = w.group_size();
  if (gs % block_inputs == 0) {
    v.mode = wo_blocks;
    v.per_group = gs / block_inputs;
  } else if (gs == w.n_in()) {
    v.mode = wo_blocks;  // one group: ended after the last block
    v.per_group = w.k_pad() / block_inputs;
  } else if (gs == 32) {
    v.mode = wo_g32;
  } else if (gs == 64) {
    v.mode = wo_g64;
  } else {
    v.mode = wo_generic;
    v.per_group = gs / 32;
  }
}

// One token row on the activation grid (quantize_row_int16, same steps and rounding), zero-padded to k_pad.
void grid_row(const float* x, int64_t n, int16_t* q, float* steps, int64_t k_pad) {
  for (int64_t b0 = 0; b0 < n; b0 += block_inputs) {
    const int64_t len = std::min(block_inputs, n - b0);
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 mx = _mm512_setzero_ps();
    __mmask16 nonfinite = 0;
    for (int64_t k = b0; k < b0 + len; k += 16) {
      const __mmask16 m = b0 + len - k >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (b0 + len - k)) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(m, x + k);
      nonfinite |= _mm512_fpclass_ps_mask(v, 0x99);  // QNaN, SNaN, +inf, -inf
      mx = _mm512_max_ps(_mm512_and_ps(v, abs_mask), mx);
    }
    const float step = activation_step(_mm512_reduce_max_ps(mx), nonfinite == 0);
    steps[b0 / block_inputs] = step;
    if (std::isnan(step)) {
      std::memset(q + b0, 0, static_cast<size_t>(len) * sizeof(int16_t));
      continue;
    }
    const __m512 inv = _mm512_set1_ps(1.0f / step);  // exact: a power of two
    for (int64_t k = b0; k < b0 + len; k += 16) {
      const __mmask16 m = b0 + len - k >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (b0 + len - k)) - 1);
      const __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), inv));  // nearest even
      _mm256_mask_storeu_epi16(q + k, m, _mm512_cvtsepi32_epi16(r));                              // saturated
    }
  }
  if (k_pad > n)
    std::memset(q + n, 0, static_cast<size_t>(k_pad - n) * sizeof(int16_t));
}

// sums[t][g] = the sum of the grid values step * q over group g (groups of gs inputs) of token t: exact integer sums
// per segment (a group's part of a block), scaled by the block's step, in order.
void grid_group_sums(const wo_input& in, int64_t n_tokens, int64_t n_in, int64_t gs, float* sums) {
  const int64_t ng = n_in / gs;
  const __m512i ones = _mm512_set1_epi16(1);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int16_t* q = in.q + t * in.ld;
    for (int64_t g = 0; g < ng; ++g) {
      float s = 0.0f;
      for (int64_t k0 = g * gs; k0 < (g + 1) * gs;) {
        const int64_t k1 = std::min((g + 1) * gs, (k0 / block_inputs + 1) * block_inputs);
        __m512i acc = _mm512_setzero_si512();
        for (int64_t k = k0; k < k1; k += 32) {
          const __mmask32 m = k1 - k >= 32 ? ~__mmask32(0) : (__mmask32(1) << (k1 - k)) - 1;
          acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maskz_loadu_epi16(m, q + k), ones));
        }
        s += in.steps[t * in.n_blocks + k0 / block_inputs] * static_cast<float>(_mm512_reduce_add_epi32(acc));
        k0 = k1;
      }
      sums[t * ng + g] = s;
    }
  }
}

// One token, rows [r0, r1) of v's weight as four streams (walk_streams).
void stream_rows(const wo_input& in, const wo_view& v, int64_t r0, int64_t r1) {
  const wo_tile_fn tile = wo_tile_for(v, 0);
  walk_streams<tile_rows>(r0, r1,
                          [&](const std::array<int64_t, tile_rows>& o, const std::array<bool, tile_rows>& valid) {
                            tile_row_refs refs;
                            refs.w.fill(v.w);
                            refs.o = o;
                            float out[wo_max_tokens][tile_rows];
                            tile(in, v, refs, 0, out);
                            for (size_t s = 0; s < tile_rows; ++s)
                              if (valid[s])
                                v.y[o[s]] = out[0][s] + (v.bias != nullptr ? v.bias[o[s]] : 0.0f);
                          });
}

// One token, outputs [r0, r1) of a gated pair: two streams of outputs, each read in gate and in up (four row
// streams); writes silu(gate) * up to gate's outputs (up's are not written: scratch).
void stream_gated_rows(const wo_input& in, const wo_view& gate, const wo_view& up, int64_t r0, int64_t r1) {
  const wo_tile_fn tile = wo_tile_for(gate, 0);
  walk_streams<2>(r0, r1, [&](const std::array<int64_t, 2>& o, const std::array<bool, 2>& valid) {
    tile_row_refs refs;
    refs.w = {gate.w, gate.w, up.w, up.w};
    refs.o = {o[0], o[1], o[0], o[1]};
    float out[wo_max_tokens][tile_rows];
    tile(in, gate, refs, 0, out);
    for (size_t h = 0; h < 2; ++h)
      if (valid[h]) {
        const float g = out[0][h] + (gate.bias != nullptr ? gate.bias[o[h]] : 0.0f);
        const float u = out[0][2 + h] + (up.bias != nullptr ? up.bias[o[h]] : 0.0f);
        silu_mul(&g, &u, 1, gate.y + o[h]);
      }
  });
}

// One token, units [u_begin, u_end) of a call: each target's rows in them streamed (stream_rows, stream_gated_rows).
// Every tile reads one target (or one gated pair), so its rows share a format.
void stream_gemv(const wo_input& in, std::span<const wo_view> views, const quantized_units& units, bool gated,
                 int64_t u_begin, int64_t u_end) {
  for (size_t i = units.target_of(u_begin, 0); i < units.n_targets && units.begin[i] < u_end; ++i) {
    const wo_view& v = views[i];
    const int64_t r0 = (std::max(u_begin, units.begin[i]) - units.begin[i]) * tile_rows;
    const int64_t r1 = std::min((std::min(u_end, units.begin[i + 1]) - units.begin[i]) * tile_rows, v.w->n_out());
    if (r0 >= r1)
      continue;
    if (gated)
      stream_gated_rows(in, views[0], views[1], r0, r1);
    else
      stream_rows(in, v, r0, r1);
  }
}

void wo_gemv(const float* x, int64_t n_tokens, int64_t n_in, std::span<const quantized_target> targets, bool gated,
             thread_pool& pool) {
  const int64_t k_pad = round_up(n_in, block_inputs);
  const int64_t n_blocks = k_pad / block_inputs;
  // One extra chunk per row: token rows a multiple of 4 KiB apart would share L1 sets.
  const int64_t ld = k_pad + 32;
  thread_local std::vector<int16_t> q;
  thread_local std::vector<float> steps, sums;
  q.resize(static_cast<size_t>(n_tokens * ld));
  steps.resize(static_cast<size_t>(n_tokens * n_blocks));
  for (int64_t t = 0; t < n_tokens; ++t)
    grid_row(x + t * n_in, n_in, q.data() + t * ld, steps.data() + t * n_blocks, k_pad);
  thread_local std::vector<uint8_t> bytes;
  const bool any_byte_dots =
      n_tokens == 1 && std::any_of(targets.begin(), targets.end(),
                                   [](const quantized_target& t) { return t.w->bits() == 4 && byte_dots_mode(*t.w); });
  if (any_byte_dots) {
    bytes.resize(static_cast<size_t>(n_blocks * 256));
    grid_bytes(q.data(), n_blocks, bytes.data());
  }
  const wo_input in{
      q.data(), ld, steps.data(), n_blocks, any_byte_dots ? bytes.data() : nullptr, stream_prefetch_for(n_tokens)};
  // The group sums of the grid values, once per distinct group size.
  std::array<wo_view, 8> views{};
  std::array<int64_t, 8> sum_sizes{};
  std::array<size_t, 8> sum_at{};
  size_t n_sizes = 0, total = 0;
  auto size_index = [&](int64_t gs) {
    return static_cast<size_t>(
        std::find(sum_sizes.begin(), sum_sizes.begin() + static_cast<std::ptrdiff_t>(n_sizes), gs) - sum_sizes.begin());
  };
  for (const quantized_target& t : targets) {
    const int64_t gs = t.w->group_size();
    if (size_index(gs) == n_sizes) {
      sum_sizes[n_sizes] = gs;
      sum_at[n_sizes++] = total;
      total += static_cast<size_t>(n_tokens * (n_in / gs));
    }
  }
  sums.resize(total);
  for (size_t s = 0; s < n_sizes; ++s)
    grid_group_sums(in, n_tokens, n_in, sum_sizes[s], sums.data() + sum_at[s]);
  for (size_t i = 0; i < targets.size(); ++i) {
    views[i] = wo_view{targets[i].w, targets[i].bias,
                       targets[i].y, sums.data() + sum_at[size_index(targets[i].w->group_size())],
                       wo_blocks,    0};
    set_mode(views[i]);
  }
  const quantized_units units(targets, gated, tile_rows);
  const std::span<const wo_view> view_span{views.data(), targets.size()};
  pool.parallel_for(units.total(), [&](int64_t u_begin, int64_t u_end) {
    if (n_tokens == 1) {
      stream_gemv(in, view_span, units, gated, u_begin, u_end);
      return;
    }
    size_t i = 0;
    for (int64_t u = u_begin; u < u_end; ++u) {
      i = units.target_of(u, i);
      const int64_t row0 = (u - units.begin[i]) * tile_rows;
      const int64_t n_out = views[i].w->n_out();
      const int rows = static_cast<int>(std::min<int64_t>(tile_rows, n_out - row0));
      for (size_t part = 0; part < (gated ? 2u : 1u); ++part) {
        const wo_view& v = views[gated ? part : i];
        auto store = [&](const float(*out)[tile_rows], int64_t r0, int n_rows, int64_t t0, int tt) {
          for (int t = 0; t < tt; ++t)
            for (int r = 0; r < n_rows; ++r)
              v.y[(t0 + t) * n_out + r0 + r] = out[t][r] + (v.bias != nullptr ? v.bias[r0 + r] : 0.0f);
        };
        float out[wo_max_tokens][tile_rows];
        for (int64_t r0 = row0; r0 < row0 + rows; r0 += wo_multi_rows) {
          const int n_rows = static_cast<int>(std::min<int64_t>(wo_multi_rows, row0 + rows - r0));
          for (int64_t t0 = 0; t0 < n_tokens; t0 += wo_max_tokens) {
            const int tt = static_cast<int>(std::min<int64_t>(wo_max_tokens, n_tokens - t0));
            wo_tile_for(v, static_cast<size_t>(tt))(in, v, consecutive_rows(*v.w, r0), t0, out);
            store(out, r0, n_rows, t0, tt);
          }
        }
      }
      if (gated)
        for (int64_t t = 0; t < n_tokens; ++t) {
          float* g = views[0].y + t * n_out + row0;
          silu_mul(g, views[1].y + t * n_out + row0, rows, g);
        }
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Weight-only GEMM: rows dequantized to bf16 panels, the bf16 weights' tiles

constexpr int64_t panel_rows = 32;
constexpr int64_t panel_tokens = 384;  // token rows per chunk, as the bf16 panel algorithm

// Row o of w as bf16 [k_pad]: (code - zero) * scale rounded once; zeros past n_in.
void dequantize_row(const quantized_panels& w, int64_t o, uint16_t* out) {
  const int64_t n_in = w.n_in(), gs = w.group_size(), ng = w.n_groups();
  const bool eight = w.bits() == 8;
  const uint8_t* row = w.row_codes(o);
  const float* scales = w.row_scales(o);
  const uint8_t* zeros = w.row_zeros(o);
  for (int64_t b = 0; b < w.k_pad() / block_inputs; ++b) {
    __m512i loads[2];
    loads[0] = _mm512_loadu_si512(row + b * (eight ? 128 : 64));
    loads[1] = eight ? _mm512_loadu_si512(row + b * 128 + 64) : _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      const int64_t k = b * block_inputs + 32 * c;
      if (k >= n_in) {
        _mm512_storeu_si512(out + k, _mm512_setzero_si512());
        continue;
      }
      __m512i codes;
      switch (c + (eight ? 4 : 0)) {
        case 0:
          codes = chunk_codes<4, 0>(loads);
          break;
        case 1:
          codes = chunk_codes<4, 1>(loads);
          break;
        case 2:
          codes = chunk_codes<4, 2>(loads);
          break;
        case 3:
          codes = chunk_codes<4, 3>(loads);
          break;
        case 4:
          codes = chunk_codes<8, 0>(loads);
          break;
        case 5:
          codes = chunk_codes<8, 1>(loads);
          break;
        case 6:
          codes = chunk_codes<8, 2>(loads);
          break;
        default:
          codes = chunk_codes<8, 3>(loads);
          break;
      }
      const int64_t g = std::min(k / gs, ng - 1);
      const __m512 zero = _mm512_set1_ps(static_cast<float>(zeros[g]));
      const __m512 scale = _mm512_set1_ps(scales[g]);
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(codes)));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(codes, 1)));
      const __m512 wlo = _mm512_mul_ps(_mm512_sub_ps(lo, zero), scale);
      const __m512 whi = _mm512_mul_ps(_mm512_sub_ps(hi, zero), scale);
      _mm512_storeu_si512(out + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(whi, wlo)));
    }
  }
}

void wo_gemm(const float* x, int64_t n_tokens, int64_t n_in, std::span<const quantized_target> targets, bool gated,
             thread_pool& pool) {
  const int64_t k_pad = round_up(n_in, block_inputs);
  const int64_t ld = k_pad + 32;
  thread_local std::vector<uint16_t> xb_storage;
  // The rows bf16_panel_product reads for the last chunk (whole chunks are a multiple of 16 rows).
  static_assert(panel_tokens % 16 == 0);
  xb_storage.resize(static_cast<size_t>(bf16_panel_rows(n_tokens) * ld));
  std::fill(xb_storage.begin() + n_tokens * ld, xb_storage.end(), uint16_t{0});
  uint16_t* xb = xb_storage.data();
  pool.parallel_for(
      n_tokens, [&](int64_t b, int64_t e) { round_rows_to_bf16(x + b * n_in, e - b, n_in, xb + b * ld, k_pad, ld); });
  const quantized_units units(targets, gated, panel_rows);
  pool.parallel_for(units.total(), [&](int64_t u_begin, int64_t u_end) {
    thread_local std::vector<uint16_t> rows_bf16;
    thread_local std::vector<uint32_t> panel;
    rows_bf16.resize(static_cast<size_t>(panel_rows * k_pad));
    panel.resize(static_cast<size_t>(k_pad / 2 * panel_rows));
    alignas(64) float bias_pad[panel_rows];
    for (int64_t t0 = 0; t0 < n_tokens; t0 += panel_tokens) {
      const int64_t tc = std::min(panel_tokens, n_tokens - t0);
      size_t i = 0;
      for (int64_t u = u_begin; u < u_end; ++u) {
        i = units.target_of(u, i);
        const int64_t o0 = (u - units.begin[i]) * panel_rows;
        const int64_t n_out = targets[i].w->n_out();
        const int n_valid = static_cast<int>(std::min(panel_rows, n_out - o0));
        for (size_t part = 0; part < (gated ? 2u : 1u); ++part) {
          const quantized_target& tg = targets[gated ? part : i];
          for (int r = 0; r < n_valid; ++r)
            dequantize_row(*tg.w, o0 + r, rows_bf16.data() + r * k_pad);
          pack_bf16_panel(rows_bf16.data(), k_pad, n_valid, 0, k_pad, panel.data());
          const float* bias = nullptr;
          if (tg.bias != nullptr) {
            for (int j = 0; j < panel_rows; ++j)
              bias_pad[j] = j < n_valid ? tg.bias[o0 + j] : 0.0f;
            bias = bias_pad;
          }
          bf16_panel_product(xb + t0 * ld, ld, tc, panel.data(), k_pad, tg.y + t0 * n_out + o0, n_out, n_valid, bias);
        }
        if (gated)
          for (int64_t t = t0; t < t0 + tc; ++t) {
            float* g = targets[0].y + t * n_out + o0;
            silu_mul(g, targets[1].y + t * n_out + o0, n_valid, g);
          }
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// W8A8

constexpr int w8_max_tokens = 4;   // 4 x 4 int32 accumulators
constexpr int64_t w8_chunk = 128;  // token rows per chunk: their int8 rows stay in L2 while the weights stream

struct w8_input {
  const uint8_t* xu;  // int8 activations + 128, ld apart, zero-code padding to k_pad
  int64_t ld;
  const float* sx;              // per-token scales
  int64_t stream_prefetch = 0;  // one token: bytes ahead along each row stream to ask for (0: none)
};

struct w8_view {
  const quantized_panels* w;
  const float* bias;
  float* y;
  int64_t per_group;  // 64-input vectors per group; 0: one group per row
};

// The row's activations + 128 as bytes, the tail to k_pad set to 128 (times zero codes); returns the scale. The same
// steps as quantize_row_int8, so the codes and the scale agree to the bit.
float quantize_row_u8(const float* x, int64_t n, uint8_t* xu, int64_t k_pad) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 mx = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - k)) - 1);
    const __m512 a = _mm512_and_ps(_mm512_maskz_loadu_ps(m, x + k), abs_mask);
    mx = _mm512_max_ps(a, mx);  // a NaN in `a` keeps mx (vmaxps returns its second operand)
  }
  const float absmax = _mm512_reduce_max_ps(mx);
  const float inv = 127.0f / absmax;
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
  const __m512i bias = _mm512_set1_epi32(128);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - k)) - 1);
    __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), vinv);
    p = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p, p, _CMP_ORD_Q), p);  // NaN -> 0
    p = _mm512_min_ps(_mm512_max_ps(p, lo), hi);
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(p), bias);  // round to nearest even (MXCSR default)
    _mm512_mask_cvtepi32_storeu_epi8(xu + k, m, q);
  }
  if (k_pad > n)
    std::memset(xu + n, 128, static_cast<size_t>(k_pad - n));
  return absmax / 127.0f;
}

inline int32_t wrapping_sub(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b));
}

// out[t][r] = the weight rows' combined sums for tokens t0.. (before the token scale and bias).
template <int T>
void w8_tile(const w8_input& in, const w8_view& v, const tile_row_refs& refs, int64_t t0, float (*out)[tile_rows]) {
  constexpr bool prefetch = T > 1;  // one token: rows far apart (walk_streams), as the weight-only tiles
  const quantized_panels& w = *v.w;
  const uint8_t* rows[tile_rows];
  const float* scales[tile_rows];
  const int32_t* code_sums[tile_rows];
  for (int r = 0; r < tile_rows; ++r) {
    const quantized_panels& wr = *refs.w[static_cast<size_t>(r)];
    const int64_t o = refs.o[static_cast<size_t>(r)];
    rows[r] = wr.row_codes(o);
    scales[r] = wr.row_scales(o);
    code_sums[r] = wr.row_code_sums(o);
    if (in.stream_prefetch > 0) {  // one token (walk_streams): as the weight-only tiles, the row after next's
      _mm_prefetch(reinterpret_cast<const char*>(scales[r] + stream_side_rows_ahead * w.n_groups()), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(code_sums[r] + stream_side_rows_ahead * w.n_groups()), _MM_HINT_T0);
    }
  }
  const uint8_t* xs[T];
  for (int t = 0; t < T; ++t)
    xs[t] = in.xu + (t0 + t) * in.ld;
  __m512i acc[tile_rows][T];
  float run[tile_rows][T];
  for (int r = 0; r < tile_rows; ++r)
    for (int t = 0; t < T; ++t) {
      acc[r][t] = _mm512_setzero_si512();
      run[r][t] = 0.0f;
    }
  int64_t g = 0, left = v.per_group;
  auto flush = [&]() {
    for (int r = 0; r < tile_rows; ++r)
      for (int t = 0; t < T; ++t) {
        const int32_t isum = wrapping_sub(_mm512_reduce_add_epi32(acc[r][t]), code_sums[r][g]);
        run[r][t] = std::fma(scales[r][g], static_cast<float>(isum), run[r][t]);
        acc[r][t] = _mm512_setzero_si512();
      }
    ++g;
  };
  const int64_t k_pad = w.k_pad();
  const auto next_tile = static_cast<ptrdiff_t>(tile_rows * w.row_bytes());  // as the weight-only tiles
  for (int64_t k = 0; k < k_pad; k += 64) {
    __m512i wv[tile_rows];
    for (int r = 0; r < tile_rows; ++r) {
      if constexpr (prefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(rows[r] + k) + prefetch_bytes, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(rows[r] + k) + next_tile, _MM_HINT_T1);
      } else if (in.stream_prefetch > 0) {
        _mm_prefetch(reinterpret_cast<const char*>(rows[r] + k) + in.stream_prefetch, _MM_HINT_T0);
      }
      wv[r] = _mm512_loadu_si512(rows[r] + k);
    }
    for (int t = 0; t < T; ++t) {
      const __m512i xv = _mm512_loadu_si512(xs[t] + k);
      for (int r = 0; r < tile_rows; ++r)
        acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], xv, wv[r]);
    }
    if (v.per_group != 0 && --left == 0) {
      flush();
      left = v.per_group;
    }
  }
  if (v.per_group == 0)
    flush();
  for (int r = 0; r < tile_rows; ++r)
    for (int t = 0; t < T; ++t)
      out[t][r] = run[r][t];
}

using w8_tile_fn = void (*)(const w8_input&, const w8_view&, const tile_row_refs&, int64_t, float (*)[tile_rows]);

template <size_t... I>
constexpr std::array<w8_tile_fn, sizeof...(I)> w8_tiles(std::index_sequence<I...>) {
  return {&w8_tile<static_cast<int>(I) + 1>...};
}

// One token, rows [r0, r1) of target i (gated: outputs [r0, r1) of the gate and up pair, silu(gate) * up to gate's) as
// four row streams (walk_streams).
void w8_stream_rows(const w8_input& in, std::span<const w8_view> views, size_t i, bool gated, int64_t r0, int64_t r1) {
  const float sx = in.sx[0];
  float out[w8_max_tokens][tile_rows];
  if (!gated) {
    const w8_view& v = views[i];
    walk_streams<tile_rows>(r0, r1,
                            [&](const std::array<int64_t, tile_rows>& o, const std::array<bool, tile_rows>& valid) {
                              tile_row_refs refs;
                              refs.w.fill(v.w);
                              refs.o = o;
                              w8_tile<1>(in, v, refs, 0, out);
                              for (size_t s = 0; s < tile_rows; ++s)
                                if (valid[s])
                                  v.y[o[s]] = std::fma(sx, out[0][s], v.bias != nullptr ? v.bias[o[s]] : 0.0f);
                            });
    return;
  }
  const w8_view& gate = views[0];
  const w8_view& up = views[1];
  walk_streams<2>(r0, r1, [&](const std::array<int64_t, 2>& o, const std::array<bool, 2>& valid) {
    tile_row_refs refs;
    refs.w = {gate.w, gate.w, up.w, up.w};
    refs.o = {o[0], o[1], o[0], o[1]};
    w8_tile<1>(in, gate, refs, 0, out);
    for (size_t h = 0; h < 2; ++h)
      if (valid[h]) {
        const float g = std::fma(sx, out[0][h], gate.bias != nullptr ? gate.bias[o[h]] : 0.0f);
        const float u = std::fma(sx, out[0][2 + h], up.bias != nullptr ? up.bias[o[h]] : 0.0f);
        silu_mul(&g, &u, 1, gate.y + o[h]);
      }
  });
}

void w8a8(const float* x, int64_t n_tokens, int64_t n_in, std::span<const quantized_target> targets, bool gated,
          thread_pool& pool) {
  static constexpr auto table = w8_tiles(std::make_index_sequence<w8_max_tokens>{});
  const int64_t k_pad = round_up(n_in, 64);
  const int64_t ld = k_pad + 64;
  thread_local std::vector<uint8_t> xu_storage;
  thread_local std::vector<float> sx_storage;
  xu_storage.resize(static_cast<size_t>(n_tokens * ld));
  sx_storage.resize(static_cast<size_t>(n_tokens));
  uint8_t* xu = xu_storage.data();
  float* sx = sx_storage.data();
  auto quantize = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      sx[t] = quantize_row_u8(x + t * n_in, n_in, xu + t * ld, k_pad);
  };
  if (n_tokens >= 16 && pool.size() > 1)
    pool.parallel_for(n_tokens, quantize);
  else
    quantize(0, n_tokens);
  std::array<w8_view, 8> views{};
  for (size_t i = 0; i < targets.size(); ++i) {
    const quantized_panels& w = *targets[i].w;
    views[i] = w8_view{&w, targets[i].bias, targets[i].y, w.group_size() == n_in ? 0 : w.group_size() / 64};
  }
  const w8_input in{xu, ld, sx, stream_prefetch_for(n_tokens)};
  const quantized_units units(targets, gated, tile_rows);
  pool.parallel_for(units.total(), [&](int64_t u_begin, int64_t u_end) {
    if (n_tokens == 1) {
      for (size_t i = units.target_of(u_begin, 0); i < units.n_targets && units.begin[i] < u_end; ++i) {
        const int64_t r0 = (std::max(u_begin, units.begin[i]) - units.begin[i]) * tile_rows;
        const int64_t r1 =
            std::min((std::min(u_end, units.begin[i + 1]) - units.begin[i]) * tile_rows, views[i].w->n_out());
        if (r0 < r1)
          w8_stream_rows(in, {views.data(), targets.size()}, i, gated, r0, r1);
      }
      return;
    }
    for (int64_t c0 = 0; c0 < n_tokens; c0 += w8_chunk) {
      const int64_t c_end = std::min(n_tokens, c0 + w8_chunk);
      size_t i = 0;
      for (int64_t u = u_begin; u < u_end; ++u) {
        i = units.target_of(u, i);
        const int64_t row0 = (u - units.begin[i]) * tile_rows;
        const int64_t n_out = views[i].w->n_out();
        const int rows = static_cast<int>(std::min<int64_t>(tile_rows, n_out - row0));
        for (size_t part = 0; part < (gated ? 2u : 1u); ++part) {
          const w8_view& v = views[gated ? part : i];
          for (int64_t t0 = c0; t0 < c_end; t0 += w8_max_tokens) {
            const int tt = static_cast<int>(std::min<int64_t>(w8_max_tokens, c_end - t0));
            float out[w8_max_tokens][tile_rows];
            table[static_cast<size_t>(tt - 1)](in, v, consecutive_rows(*v.w, row0), t0, out);
            for (int t = 0; t < tt; ++t)
              for (int r = 0; r < rows; ++r)
                v.y[(t0 + t) * n_out + row0 + r] =
                    std::fma(sx[t0 + t], out[t][r], v.bias != nullptr ? v.bias[row0 + r] : 0.0f);
          }
        }
        if (gated)
          for (int64_t t = c0; t < c_end; ++t) {
            float* g = views[0].y + t * n_out + row0;
            silu_mul(g, views[1].y + t * n_out + row0, rows, g);
          }
      }
    }
  });
}

}  // namespace

bool have_quantized_avx512_kernels() { return true; }

void matmul_quantized_avx512(const float* x, int64_t n_tokens, int64_t n_in, std::span<const quantized_target> targets,
                             bool gated, thread_pool& pool, matmul_path path) {
  ACTORLLM_CHECK(!targets.empty() && targets.size() <= 8, "matmul_quantized_avx512: 1 to 8 targets");
  ACTORLLM_CHECK(!gated || (targets.size() == 2 && targets[0].w->n_out() == targets[1].w->n_out()),
                 "matmul_quantized_avx512: a gated group is a gate and an up target of equal size");
  const activation_quant a = targets[0].w->activations();
  for (const quantized_target& t : targets)
    ACTORLLM_CHECK(t.w->activations() == a && quantized_vector_format(a, n_in, t.w->group_size()),
                   "matmul_quantized_avx512: targets of one activation kind in a vector format");
  if (a == activation_quant::int8_per_token) {
    w8a8(x, n_tokens, n_in, targets, gated, pool);
    return;
  }
  if (path == matmul_path::automatic)
    path = n_tokens < matmul_gemm_min_tokens ? matmul_path::gemv : matmul_path::gemm;
  if (path == matmul_path::gemm)
    wo_gemm(x, n_tokens, n_in, targets, gated, pool);
  else
    wo_gemv(x, n_tokens, n_in, targets, gated, pool);
}

#else

bool have_quantized_avx512_kernels() { return false; }

void matmul_quantized_avx512(const float*, int64_t, int64_t, std::span<const quantized_target>, bool, thread_pool&,
                             matmul_path) {
  ACTORLLM_CHECK(false, "matmul_quantized_avx512: this build has no AVX-512 quantized kernels");
}

#endif

}  // namespace actorllm::cpu
