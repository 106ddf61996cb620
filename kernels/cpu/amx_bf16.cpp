// AMX tiles over the packed panels. A panel is [k/2][32] bf16 pairs, 128 bytes a pair row: the B operand of
// TDPBF16PS (16 pair rows x 16 outputs, 64 bytes a row) is a panel's 16 pair rows, loaded with a 128-byte stride, its
// left or right half. So a 32-output panel is two B tiles, 32 token rows two A tiles, and the four 16 x 16 sum tiles
// take 4 of the 8 tile registers: each A and each B tile loaded feeds two products.
//
// Blocking: K goes in blocks of 128 pairs, so that a panel's block (16 KiB) stays in L1 while every 32-row block of
// the token rows passes over it; the sums go back to memory between K blocks. Four panels (128 outputs) go through
// each K block together, so that the token rows' block (n_rows x 512 bytes) is read from L2 for four panels.
// Up to 32 rows (batched decode) each panel is read once, from memory: it goes through all of K at once (the sums stay
// in their tiles) and each step asks for its lines 8 KiB ahead into L2. On a 2-vCPU Xeon (bench_kernels decode_b32,
// 2048 -> 8192): 1.9 ms in K blocks, 1.59-1.70 ms through all of K, 1.48-1.51 ms with the prefetch (4 KiB: 1.50, 16
// KiB: 1.54; into L1 at 2-4 KiB: 1.71-1.76).
// Compact panels (amx_rebuilt_panels_product) are rebuilt into a buffer that stays in L1 just before the B tiles load
// it: up to 32 rows a step (16 pair rows, 2 KiB) at a time, more rows a K block (128 pair rows, 16 KiB) at a time,
// which every 32-row block then reads. Expanding each group's panels into a plain copy first wrote 2 GB a step of
// TinyLlama-1.1B through L2: on the 2-vCPU Xeon batch 5-32 ran 1.8-1.9x slower that way (session 51), batch 40 and 64
// 1.30x and 1.16x (session 52; docs/cpu-speed-log.md). The caller still expands for prefill and batches over 64 tokens,
// where many 32-row blocks read the copy (matmul_bf16.cpp, amx_rebuild_max_rows).
#include "kernels/cpu/amx_bf16.hpp"

#include "util/check.hpp"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#endif

namespace actorllm::cpu {

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)

namespace {

constexpr int64_t k_block_pairs = 128;  // 16 KiB of a panel
constexpr int panels_together = 4;
constexpr size_t panel_row_bytes = 128;  // one pair row of a panel: 32 outputs x 2 bf16
constexpr size_t sums_row_bytes = 128;   // 32 floats

// The tile configuration's memory layout (palette 1): 8 tiles of 16 rows x 64 bytes.
struct tile_config {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

bool request_tile_data() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0)
    return false;
  constexpr unsigned amx_bf16 = 1u << 22, amx_tile = 1u << 24;
  if ((d & amx_bf16) == 0 || (d & amx_tile) == 0)
    return false;
  constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
}

// Every tile 64 bytes a row. Tiles 0-1 and 4 (a first block's sums and A tile) hold `first` token rows, 2-3 `second`
// (a second block's sums, or a second panel's: pair_16_rows), 5 `fifth` (the second block's A tile, or a B tile), 6-7
// 16 (B tiles): where a block holds fewer than 16 tokens, the tiles load and multiply only the rows that hold tokens.
void configure_tiles(int first = 16, int second = 16, int fifth = 16) {
  tile_config cfg;
  const int rows[8] = {first, first, second, second, first, fifth, 16, 16};
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = static_cast<uint8_t>(rows[i]);
  }
  _tile_loadconfig(&cfg);
}

constexpr size_t stream_prefetch_bytes = 8192;

// A step's 2 KiB of B lines, stream_prefetch_bytes further on, into L2.
inline void prefetch_ahead(const char* bk) {
  for (size_t line = 0; line < 32; ++line)
    _mm_prefetch(bk + stream_prefetch_bytes + line * 64, _MM_HINT_T1);
}

// The B rows of step kp (16 pair rows, 128 bytes apart) in a plain panel, read in place; streaming: asking for the
// lines stream_prefetch_bytes on.
template <bool Streaming>
struct plain_rows {
  const char* panel;
  const char* operator()(int64_t kp) const {
    const char* bk = panel + kp * panel_row_bytes;
    if constexpr (Streaming)
      prefetch_ahead(bk);
    return bk;
  }
};

// The B rows of step kp of a panel in another form, rebuilt into a 2 KiB buffer (amx_rebuilt_panels_product).
struct rebuilt_rows {
  const void* panel;
  int64_t k_pad;
  panel_rows_fn rows_of;
  uint32_t* buffer;
  const char* operator()(int64_t kp) const {
    rows_of(panel, k_pad, kp, buffer);
    return reinterpret_cast<const char*>(buffer);
  }
};

// The B rows of step kp in a K block of a panel rebuilt into a buffer, whose first pair row is the panel's kp0.
struct block_rows {
  const char* block;
  int64_t kp0;
  const char* operator()(int64_t kp) const { return block + (kp - kp0) * panel_row_bytes; }
};

// The tile numbers are literals throughout: GCC 12's AMX intrinsics paste them into inline assembly, so a helper
// taking the tile as a parameter (even a template one) does not assemble.
// Sum tiles 0-3 for token rows [0, 32) x the panel's 32 outputs over pairs [kp_begin, kp_end): zeroed or loaded from
// `sums` (32 rows, 128 bytes apart), then stored back. a: token row 0, at k = 0, a_stride bytes a row. rows(kp): the
// panel's B rows of step kp (plain_rows, rebuilt_rows).
template <class Rows>
void block_32_rows(const char* a, size_t a_stride, const Rows& rows, int64_t kp_begin, int64_t kp_end, float* sums,
                   bool first) {
  char* s = reinterpret_cast<char*>(sums);
  const size_t half = 16 * sums_row_bytes;
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, s, sums_row_bytes);
    _tile_loadd(1, s + 64, sums_row_bytes);
    _tile_loadd(2, s + half, sums_row_bytes);
    _tile_loadd(3, s + half + 64, sums_row_bytes);
  }
  for (int64_t kp = kp_begin; kp < kp_end; kp += 16) {
    const char* ak = a + kp * 4;  // a pair is two bf16
    const char* bk = rows(kp);
    _tile_loadd(4, ak, a_stride);
    _tile_loadd(5, ak + 16 * a_stride, a_stride);
    _tile_loadd(6, bk, panel_row_bytes);
    _tile_loadd(7, bk + 64, panel_row_bytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, s, sums_row_bytes);
  _tile_stored(1, s + 64, sums_row_bytes);
  _tile_stored(2, s + half, sums_row_bytes);
  _tile_stored(3, s + half + 64, sums_row_bytes);
}

// The same for 16 token rows (sum tiles 0 and 1).
template <class Rows>
void block_16_rows(const char* a, size_t a_stride, const Rows& rows, int64_t kp_begin, int64_t kp_end, float* sums,
                   bool first) {
  char* s = reinterpret_cast<char*>(sums);
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
  } else {
    _tile_loadd(0, s, sums_row_bytes);
    _tile_loadd(1, s + 64, sums_row_bytes);
  }
  for (int64_t kp = kp_begin; kp < kp_end; kp += 16) {
    const char* bk = rows(kp);
    _tile_loadd(4, a + kp * 4, a_stride);
    _tile_loadd(6, bk, panel_row_bytes);
    _tile_loadd(7, bk + 64, panel_row_bytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
  }
  _tile_stored(0, s, sums_row_bytes);
  _tile_stored(1, s + 64, sums_row_bytes);
}

// 16 token rows over two panels side by side through all of K (sum tiles 0-1 panel p's, 2-3 panel q's), so that a
// thread reads two streams of panel lines, not one, and each A tile feeds four products. B tile 5 is loaded again for
// q once p's first product has read it. On the 2-vCPU Xeon (session 53): a /tmp copy of the rebuilt 16-row loop over
// 1.5 GB of compact panels read 1.07-1.08x one panel at a time, and 8-row tiles (configure_tiles) another 1.04x;
// bench_cpu_decode batch 8 (TinyLlama-1.1B shape), binaries alternated, seven pairs: 1.02-1.10x, median 1.09x.
template <class Rows>
void pair_16_rows(const char* a, size_t a_stride, const Rows& rows_p, const Rows& rows_q, int64_t n_kp, float* sums_p,
                  float* sums_q) {
  char* sp = reinterpret_cast<char*>(sums_p);
  char* sq = reinterpret_cast<char*>(sums_q);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t kp = 0; kp < n_kp; kp += 16) {
    const char* bp = rows_p(kp);
    _tile_loadd(4, a + kp * 4, a_stride);
    _tile_loadd(5, bp, panel_row_bytes);
    _tile_loadd(6, bp + 64, panel_row_bytes);
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 6);
    const char* bq = rows_q(kp);
    _tile_loadd(7, bq, panel_row_bytes);
    _tile_loadd(5, bq + 64, panel_row_bytes);
    _tile_dpbf16ps(2, 4, 7);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, sp, sums_row_bytes);
  _tile_stored(1, sp + 64, sums_row_bytes);
  _tile_stored(2, sq, sums_row_bytes);
  _tile_stored(3, sq + 64, sums_row_bytes);
}

// Every block of n_rows token rows over one panel's pairs [kp_begin, kp_end): 32 rows at a time, then 16; row r's sums
// at sums + r * 32. One block (n_rows 16 or 32) where the sums stay in their tiles through all of K.
template <class Rows>
void row_blocks(const char* a, size_t a_stride, int64_t n_rows, const Rows& rows, int64_t kp_begin, int64_t kp_end,
                float* sums, bool first) {
  int64_t r = 0;
  for (; r + 32 <= n_rows; r += 32)
    block_32_rows(a + static_cast<size_t>(r) * a_stride, a_stride, rows, kp_begin, kp_end, sums + r * 32, first);
  if (r < n_rows)
    block_16_rows(a + static_cast<size_t>(r) * a_stride, a_stride, rows, kp_begin, kp_end, sums + r * 32, first);
}

}  // namespace

bool amx_bf16_usable() {
  static const bool usable = request_tile_data();
  return usable;
}

void amx_panels_product(const uint16_t* xb, int64_t ld, int64_t n_rows, const uint32_t* const* panels, int n_panels,
                        int64_t k_pad, float* sums) {
  ACTORLLM_CHECK(amx_bf16_usable(), "amx_panels_product: this process cannot run AMX tiles");
  ACTORLLM_CHECK(n_rows % 16 == 0 && k_pad % 32 == 0, "amx_panels_product: n_rows a multiple of 16, k_pad of 32");
  configure_tiles();
  const int64_t n_kp = k_pad / 2;
  const char* a = reinterpret_cast<const char*>(xb);
  const size_t a_stride = static_cast<size_t>(ld) * sizeof(uint16_t);
  const size_t panel_sums = static_cast<size_t>(n_rows) * 32;
  const bool streaming = n_rows <= 32;
  const int64_t kb = streaming ? n_kp : k_block_pairs;
  for (int p0 = 0; p0 < n_panels; p0 += panels_together) {
    const int p1 = std::min(n_panels, p0 + panels_together);
    for (int64_t kp0 = 0; kp0 < n_kp; kp0 += kb) {
      const int64_t kp1 = std::min(n_kp, kp0 + kb);
      for (int p = p0; p < p1; ++p) {
        const char* panel = reinterpret_cast<const char*>(panels[p]);
        float* s = sums + static_cast<size_t>(p) * panel_sums;
        if (streaming)  // one block of 16 or 32 rows through all of K
          row_blocks(a, a_stride, n_rows, plain_rows<true>{panel}, kp0, kp1, s, true);
        else
          row_blocks(a, a_stride, n_rows, plain_rows<false>{panel}, kp0, kp1, s, kp0 == 0);
      }
    }
  }
  _tile_release();
}

void amx_rebuilt_panels_product(const uint16_t* xb, int64_t ld, int64_t n_rows, const void* const* panels, int n_panels,
                                int64_t k_pad, panel_rows_fn rows_of, float* sums) {
  ACTORLLM_CHECK(amx_bf16_usable(), "amx_rebuilt_panels_product: this process cannot run AMX tiles");
  ACTORLLM_CHECK(n_rows > 0 && k_pad % 32 == 0, "amx_rebuilt_panels_product: n_rows positive, k_pad a multiple of 32");
  const int tokens = static_cast<int>(std::min<int64_t>(n_rows, 32));
  if (n_rows <= 16)  // one block of rows, over one or two panels at a time
    configure_tiles(tokens, tokens, 16);
  else if (n_rows < 32)  // two blocks, the second partly empty
    configure_tiles(16, tokens - 16, tokens - 16);
  else
    configure_tiles();
  const int64_t laid_out_rows = (n_rows + 15) / 16 * 16;  // the rows the sums and xb have room for
  const int64_t n_kp = k_pad / 2;
  const char* a = reinterpret_cast<const char*>(xb);
  const size_t a_stride = static_cast<size_t>(ld) * sizeof(uint16_t);
  const size_t panel_sums = static_cast<size_t>(laid_out_rows) * 32;
  if (n_rows <= 32) {  // one block of rows: each step rebuilt as its tiles take it, the sums in their tiles
    alignas(64) uint32_t step[2][16 * 32];  // one step's 16 pair rows of 32 outputs, of two panels
    int p = 0;
    if (n_rows <= 16)  // two panels at a time, two streams
      for (; p + 2 <= n_panels; p += 2)
        pair_16_rows(a, a_stride, rebuilt_rows{panels[p], k_pad, rows_of, step[0]},
                     rebuilt_rows{panels[p + 1], k_pad, rows_of, step[1]}, n_kp,
                     sums + static_cast<size_t>(p) * panel_sums, sums + static_cast<size_t>(p + 1) * panel_sums);
    for (; p < n_panels; ++p)
      row_blocks(a, a_stride, laid_out_rows, rebuilt_rows{panels[p], k_pad, rows_of, step[0]}, 0, n_kp,
                 sums + static_cast<size_t>(p) * panel_sums, true);
  } else {  // several blocks of rows: a K block of the panel (16 KiB) rebuilt, then every row block over it
    alignas(64) static thread_local uint32_t block[k_block_pairs * 32];
    for (int64_t kp0 = 0; kp0 < n_kp; kp0 += k_block_pairs) {  // the rows' K block stays in L2 for every panel
      const int64_t kp1 = std::min(n_kp, kp0 + k_block_pairs);
      for (int p = 0; p < n_panels; ++p) {
        for (int64_t kp = kp0; kp < kp1; kp += 16)
          rows_of(panels[p], k_pad, kp, block + (kp - kp0) * 32);
        row_blocks(a, a_stride, laid_out_rows, block_rows{reinterpret_cast<const char*>(block), kp0}, kp0, kp1,
                   sums + static_cast<size_t>(p) * panel_sums, kp0 == 0);
      }
    }
  }
  _tile_release();
}

#else

bool amx_bf16_usable() { return false; }

void amx_panels_product(const uint16_t*, int64_t, int64_t, const uint32_t* const*, int, int64_t, float*) {
  ACTORLLM_CHECK(false, "amx_panels_product: this build has no AMX-BF16 kernels");
}

void amx_rebuilt_panels_product(const uint16_t*, int64_t, int64_t, const void* const*, int, int64_t, panel_rows_fn,
                                float*) {
  ACTORLLM_CHECK(false, "amx_rebuilt_panels_product: this build has no AMX-BF16 kernels");
}

#endif

}  // namespace actorllm::cpu
