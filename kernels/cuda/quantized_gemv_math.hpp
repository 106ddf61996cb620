// The CUDA backend's quantized Linear weights (tensor_layout::cuda_q4 / cuda_q8) and the arithmetic of their GEMV,
// as __host__ __device__ functions: where each code lies in the device image, how a 32-bit word of codes turns into
// the bf16 operands of a tensor-core mma.m16n8k16, and how a group's sum meets its scale. The kernels in
// quantized_gemv.cu call exactly these; the host packer (quantized_weight.cpp) writes the image with them; and
// tests/kernels/cuda/quantized_gemv_math_test.cpp runs the kernel's loop on the CPU with them against a float64
// reference, with the PTX fragment layouts written out independently there. A C++17 header (nvcc compiles .cu files as
// C++17).
//
// The image of a weight [n_out, n_in] with `bits` 4 or 8 and group_size a multiple of 16:
// - codes: row tiles of 16 output rows (the last one padded with zero codes), each split into chunks of
//   inputs_per_chunk inputs (64 for 4-bit, 32 for 8-bit; the last chunk padded with zero codes), each chunk into
//   k-tiles of 16 consecutive inputs. A chunk is 512 bytes: lane l's 16 bytes at 16 l, which one 128-bit load per
//   lane of a warp reads, coalesced. Those 16 bytes are exactly lane l's A fragments (PTX ISA, "Matrix Fragments for
//   mma.m16n8k16 with floating point type") of the chunk's k-tiles: 4-bit, word j (little-endian 32 bits) = k-tile
//   j, its element a[2s] in nibble s and a[2s+1] in nibble s + 4 (s = 0..3), so that one shift and one mask-or give
//   the bf16x2 register s (see q4_biased_pair); 8-bit, words 2j and 2j + 1 = k-tile j, a[0..3] then a[4..7] in byte
//   order. Which input of a k-tile the mma's k index r stands for is tile_input(r), a permutation chosen so that the
//   four inputs a lane multiplies are neighbours (4 t .. 4 t + 3, t = lane % 4): its B fragment is one 16-byte load
//   of x.
// - scales: f32 [n_row_tiles][n_groups][16], the 16 rows of a tile side by side (a warp reads a group's scales of
//   its rows from one 64-byte line, not from 16 rows far apart); rows past n_out have scale 0.
// - zeros: u8 [n_row_tiles][n_groups][16] likewise (zero points up to 2^bits: GPTQ v1's 16 for 4-bit fits).
//
// The GEMV multiplies the exact integers (code - zero), as bf16, with x rounded to bf16 on the tensor cores, sums
// each group's k-tiles in f32 and adds scale * group sum into an f32 total per output (total = fma(scale, sum,
// total)). Only x is rounded; the weight's values are never rounded to bf16 there (the prefill path, which
// dequantizes to bf16 for cuBLAS, rounds each (code - zero) * scale once, as dequantize_to_bf16).
#pragma once

#include <cstdint>

#include "kernels/cuda/host_device.hpp"

namespace actorllm::cuda::qgemv {

/// Rows of an mma A tile (m16) and inputs of a k-tile (k16).
inline constexpr int tile_rows = 16;
inline constexpr int tile_inputs = 16;
/// Tokens (columns of the mma B and D tiles, n8): the GEMV serves up to this many rows of x at once.
inline constexpr int max_tokens = 8;
/// Up to this many GEMV passes (of max_tokens rows of x each) before the backend dequantizes the weight for cuBLAS
/// instead: 4 passes read 4-bit codes for 2.1 bytes per weight, a dequantization writes and rereads bf16 for 4.5.
inline constexpr int max_gemv_passes = 4;
/// Bytes of one chunk: a warp's 32 lanes times a 16-byte load.
inline constexpr int chunk_bytes = 512;
/// Bytes per lane of a chunk.
inline constexpr int lane_bytes = 16;

/// k-tiles per chunk: 4 (64 inputs) for 4-bit codes, 2 (32 inputs) for 8-bit ones.
ACTORLLM_HOST_DEVICE constexpr int tiles_per_chunk(int bits) { return bits == 4 ? 4 : 2; }
/// Inputs per chunk.
ACTORLLM_HOST_DEVICE constexpr int inputs_per_chunk(int bits) { return tile_inputs * tiles_per_chunk(bits); }

// ---- the mma.m16n8k16 fragments (bf16 A and B, f32 C/D) ------------------------------------------------------

/// Row in its 16x16 A tile of element e (0..7) of lane `lane`'s A fragment: groupID for a0, a1, a4, a5, groupID + 8
/// for a2, a3, a6, a7.
ACTORLLM_HOST_DEVICE constexpr int a_row(int lane, int e) { return (lane >> 2) + ((e >> 1) & 1) * 8; }
/// Column (the mma's k index) in its A tile of element e: 2 * threadID_in_group + (e & 1), plus 8 for a4..a7.
ACTORLLM_HOST_DEVICE constexpr int a_col(int lane, int e) { return (lane & 3) * 2 + (e & 1) + (e >> 2) * 8; }
/// Row of B (the mma's k index) of element i (0..3) of lane `lane`'s B fragment: 2 * threadID_in_group + (i & 1),
/// plus 8 for b2, b3. Its token (column of B) is groupID = lane >> 2.
ACTORLLM_HOST_DEVICE constexpr int b_row(int lane, int i) { return (lane & 3) * 2 + (i & 1) + (i >> 1) * 8; }

/// The input within its k-tile (0..15) that the mma's k index r stands for: k indices 2t, 2t + 1, 2t + 8, 2t + 9
/// (a lane's, t = lane % 4, in A and in B alike) are inputs 4t .. 4t + 3. Any bijection would give the same sums;
/// this one makes a lane's inputs neighbours.
ACTORLLM_HOST_DEVICE constexpr int tile_input(int r) { return 4 * ((r & 7) >> 1) + (r & 1) + 2 * (r >> 3); }
/// The input within its k-tile of element e of lane `lane`'s A fragment: 4t + (e & 1) + 2 (e >> 2).
ACTORLLM_HOST_DEVICE constexpr int a_input(int lane, int e) { return tile_input(a_col(lane, e)); }
/// The input within its k-tile of element i of lane `lane`'s B fragment: 4t + i (t = lane % 4).
ACTORLLM_HOST_DEVICE constexpr int b_input(int lane, int i) { return tile_input(b_row(lane, i)); }
/// Token (column of B and of D) of lane `lane`'s B fragment.
ACTORLLM_HOST_DEVICE constexpr int b_token(int lane) { return lane >> 2; }
/// Row in its tile of element i (0..3) of lane `lane`'s D fragment: groupID, or groupID + 8 for d2, d3.
ACTORLLM_HOST_DEVICE constexpr int d_row(int lane, int i) { return (lane >> 2) + (i >> 1) * 8; }
/// Token of element i of lane `lane`'s D fragment: 2 * threadID_in_group + (i & 1).
ACTORLLM_HOST_DEVICE constexpr int d_token(int lane, int i) { return (lane & 3) * 2 + (i & 1); }

// ---- where a code lies in a chunk ----------------------------------------------------------------------------

/// A code's place in its chunk: byte offset, and the bit of that byte its lowest bit is at (0 or 4; 0 for 8-bit).
struct code_place {
  int byte;
  int shift;
};

/// Nibble of a 4-bit k-tile word holding element e: a[2s] in nibble s, a[2s + 1] in nibble s + 4.
ACTORLLM_HOST_DEVICE constexpr int q4_nibble(int e) { return (e >> 1) + (e & 1) * 4; }

/// Where element e (0..7) of k-tile j of lane `lane`'s fragments lies in a chunk.
ACTORLLM_HOST_DEVICE constexpr code_place place_in_chunk(int bits, int lane, int j, int e) {
  if (bits == 4) {
    const int nibble = q4_nibble(e);
    return {lane * lane_bytes + j * 4 + nibble / 2, (nibble % 2) * 4};
  }
  return {lane * lane_bytes + (2 * j + (e >> 2)) * 4 + (e & 3), 0};
}

// ---- turning words of codes into bf16x2 registers ------------------------------------------------------------

/// 4-bit: the bf16x2 register s (0..3) of a k-tile word before the zero point is taken off: (128 + code of a[2s],
/// 128 + code of a[2s + 1]) as bf16 (low half first). 0x4300 is bf16 128, whose 7-bit mantissa counts units, so
/// or-ing a 4-bit code into it gives 128 + code exactly: one shift and one lop3 per two codes.
ACTORLLM_HOST_DEVICE constexpr uint32_t q4_biased_pair(uint32_t word, int s) {
  return ((word >> (4 * s)) & 0x000F000Fu) | 0x43004300u;
}

/// The bf16x2 (128 + zero, 128 + zero) that q4_biased_pair's registers are reduced by (bf16 subtraction, exact:
/// every value involved is an integer below 256). zero <= 16 (GPTQ v1's offset included).
ACTORLLM_HOST_DEVICE constexpr uint32_t q4_zero_pair(uint32_t zero) { return 0x43004300u | (zero * 0x00010001u); }

/// 8-bit: byte k (0..3) of a word as the f32 2^23 + code (the code is the low bits of the mantissa of 2^23), from
/// which the f32 2^23 + zero is subtracted exactly; pairs of the differences are then rounded (exactly: integers of
/// at most 8 bits) to bf16x2.
ACTORLLM_HOST_DEVICE constexpr uint32_t q8_biased_f32(uint32_t word, int k) {
  return 0x4B000000u | ((word >> (8 * k)) & 0xFFu);
}
/// The f32 bits of 2^23 + zero.
ACTORLLM_HOST_DEVICE constexpr uint32_t q8_zero_f32(uint32_t zero) { return 0x4B000000u | zero; }

/// Whether register s (0..3) of an A fragment holds row groupID + 8 (s odd) rather than groupID: it takes that
/// row's zero point.
ACTORLLM_HOST_DEVICE constexpr bool register_is_high_row(int s) { return (s & 1) != 0; }

// ---- groups --------------------------------------------------------------------------------------------------

/// Which quantization group the k-tiles a warp is walking belong to: the group of the current k-tile and the first
/// k-tile of the next group. A warp walks consecutive k-tiles; when one reaches `next`, its group's sum is done.
struct group_cursor {
  int32_t group;
  int32_t next;
};

/// The cursor at k-tile `ktile`.
ACTORLLM_HOST_DEVICE constexpr group_cursor group_at(int32_t ktile, int32_t tiles_per_group) {
  return {ktile / tiles_per_group, (ktile / tiles_per_group + 1) * tiles_per_group};
}

/// Moves the cursor to k-tile `ktile` (not before its current one). True when a new group starts there: the caller
/// first adds the finished group's sums into the totals (finish_group), then loads the new group's scales.
ACTORLLM_HOST_DEVICE inline bool group_advance(group_cursor& c, int32_t ktile, int32_t tiles_per_group) {
  if (ktile < c.next)
    return false;
  c = group_at(ktile, tiles_per_group);
  return true;
}

/// A finished group: total[i] = fma(scale of the row of D element i, sum[i], total[i]); sum[i] = 0 for the next.
/// scale_low is groupID's row scale, scale_high that of groupID + 8.
ACTORLLM_HOST_DEVICE inline void finish_group(float (&total)[4], float (&sum)[4], float scale_low, float scale_high) {
#ifdef __CUDA_ARCH__
  total[0] = __fmaf_rn(scale_low, sum[0], total[0]);
  total[1] = __fmaf_rn(scale_low, sum[1], total[1]);
  total[2] = __fmaf_rn(scale_high, sum[2], total[2]);
  total[3] = __fmaf_rn(scale_high, sum[3], total[3]);
#else
  total[0] = __builtin_fmaf(scale_low, sum[0], total[0]);
  total[1] = __builtin_fmaf(scale_low, sum[1], total[1]);
  total[2] = __builtin_fmaf(scale_high, sum[2], total[2]);
  total[3] = __builtin_fmaf(scale_high, sum[3], total[3]);
#endif
  sum[0] = sum[1] = sum[2] = sum[3] = 0.0f;
}

// ---- the image and the work split ----------------------------------------------------------------------------

/// Sizes and byte offsets of a weight's image (see the file comment).
struct gemv_layout {
  int32_t bits = 4;
  int64_t n_out = 0;
  int64_t n_in = 0;
  int64_t group_size = 0;
  int32_t n_groups = 0;         ///< n_in / group_size
  int32_t tiles_per_group = 0;  ///< group_size / 16
  int32_t n_ktiles = 0;         ///< n_in / 16
  int32_t n_row_tiles = 0;      ///< ceil(n_out / 16)
  int32_t n_chunks = 0;         ///< chunks per row tile: ceil(n_in / inputs_per_chunk)
  int64_t scales_offset = 0;    ///< bytes from the image's start (the codes take the bytes before)
  int64_t zeros_offset = 0;
  int64_t total_bytes = 0;
};

/// The layout of a weight [n_out, n_in] with `bits` and `group_size` (which the caller checked: bits 4 or 8,
/// group_size a positive multiple of 16 dividing n_in).
ACTORLLM_HOST_DEVICE constexpr gemv_layout make_gemv_layout(int bits, int64_t n_out, int64_t n_in, int64_t group_size) {
  gemv_layout l;
  l.bits = bits;
  l.n_out = n_out;
  l.n_in = n_in;
  l.group_size = group_size;
  l.n_groups = static_cast<int32_t>(n_in / group_size);
  l.tiles_per_group = static_cast<int32_t>(group_size / tile_inputs);
  l.n_ktiles = static_cast<int32_t>(n_in / tile_inputs);
  l.n_row_tiles = static_cast<int32_t>((n_out + tile_rows - 1) / tile_rows);
  l.n_chunks = static_cast<int32_t>((n_in + inputs_per_chunk(bits) - 1) / inputs_per_chunk(bits));
  const int64_t records = static_cast<int64_t>(l.n_row_tiles) * l.n_groups;
  l.scales_offset = static_cast<int64_t>(l.n_row_tiles) * l.n_chunks * chunk_bytes;
  l.zeros_offset = l.scales_offset + records * tile_rows * 4;
  l.total_bytes = l.zeros_offset + records * tile_rows;
  return l;
}

/// Byte offset of chunk `chunk` of row tile `row_tile` in the image.
ACTORLLM_HOST_DEVICE constexpr int64_t chunk_offset(const gemv_layout& l, int64_t row_tile, int64_t chunk) {
  return (row_tile * l.n_chunks + chunk) * chunk_bytes;
}

/// Index of the first of the 16 scales (and zero points) of row tile `row_tile` and group `group`.
ACTORLLM_HOST_DEVICE constexpr int64_t group_record(const gemv_layout& l, int64_t row_tile, int64_t group) {
  return (row_tile * l.n_groups + group) * tile_rows;
}

/// A weight's image on the device, as the kernels take it.
struct weight_view {
  const uint8_t* codes = nullptr;  ///< the image's start
  const float* scales = nullptr;
  const uint8_t* zeros = nullptr;
  gemv_layout layout;
};

/// Warps per GEMV block: they split a row tile's chunks between them and add their sums in shared memory at the end.
inline constexpr int gemv_warps = 8;
/// Chunks a warp loads before it computes on them (in flight at once: 4 x 16 bytes per lane and row tile).
inline constexpr int gemv_chunks_in_flight = 4;

/// The GEMV's grid: `row_tiles_per_block` (1 or 2) row tiles per block of gemv_warps warps, `blocks` blocks
/// (quantized_weight.hpp's plan_quantized_gemv).
struct gemv_launch {
  int row_tiles_per_block = 1;
  unsigned blocks = 0;
};

/// The chunks [begin, end) warp `warp` of a block takes: consecutive ranges, as even as can be.
struct chunk_range {
  int32_t begin;
  int32_t end;
};
ACTORLLM_HOST_DEVICE constexpr chunk_range warp_chunks(int32_t n_chunks, int warp) {
  return {static_cast<int32_t>(static_cast<int64_t>(n_chunks) * warp / gemv_warps),
          static_cast<int32_t>(static_cast<int64_t>(n_chunks) * (warp + 1) / gemv_warps)};
}

}  // namespace actorllm::cuda::qgemv
