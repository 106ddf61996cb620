// The quantized GEMV (decode: up to 8 tokens a pass) on the tensor cores, and the dequantization of the prefill path.
//
// GEMV: a block of gemv_warps warps owns R (1 or 2) row tiles of 16 outputs and reads their codes once for every
// token. Its warps split the tiles' chunks into consecutive ranges; a warp loads gemv_chunks_in_flight chunks per row
// tile (one 128-bit load per lane each, every lane's 16 bytes exactly its A fragments), then, chunk by chunk, its
// x inputs (one 16-byte load per k-tile and lane, f32 through L1, rounded to bf16 in registers: the same B fragment
// serves the R tiles), and for each 16x16 k-tile turns a word of codes into four bf16x2 registers of (code - zero)
// (4-bit: shift and lop3, then one bf16x2 subtraction per two codes; 8-bit: byte into an f32 mantissa, f32
// subtraction, pack to bf16x2) and runs mma.m16n8k16 (f32 accumulation) into the group's sums. At a group's end the
// sums go into f32 totals times the group's scale (the next group's scales are loaded a group ahead). The warps'
// totals meet in shared memory and are added in warp order (deterministic), the bias added, the outputs written. A
// grid of a few hundred blocks of 256 threads, 2-4 KB of codes in flight per warp.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/launch_geometry.hpp"
#include "kernels/cuda/quantized_gemv.hpp"

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace actorllm::cuda {
namespace {

using namespace qgemv;

constexpr int gemv_threads = gemv_warps * 32;

__device__ __forceinline__ uint32_t bits_of(__nv_bfloat162 v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

__device__ __forceinline__ __nv_bfloat162 bf16x2_of(uint32_t u) {
  __nv_bfloat162 v;
  memcpy(&v, &u, sizeof u);
  return v;
}

// 16 bytes of codes, streamed: read once per call, so they bypass L1 (where x lives) and are not kept.
__device__ __forceinline__ uint4 load_codes(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <int I>
__device__ __forceinline__ uint32_t word_of(const uint4& v) {
  static_assert(I >= 0 && I < 4, "a uint4 has four words");
  if constexpr (I == 0)
    return v.x;
  else if constexpr (I == 1)
    return v.y;
  else if constexpr (I == 2)
    return v.z;
  else
    return v.w;
}

// D += A B for one 16x16 bf16 A tile and one 16x8 bf16 B tile, f32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // built for an architecture without bf16 mma (sm_80 and later have it)
#endif
}

// The A fragment of k-tile J of a chunk (its lane's 16 bytes in q): (code - zero) as bf16x2 registers. zero_low /
// zero_high: the zero points of rows groupID and groupID + 8 in the form the bit width needs (q4_zero_pair /
// q8_zero_f32).
template <int Bits, int J>
__device__ __forceinline__ void a_fragment(const uint4& q, uint32_t zero_low, uint32_t zero_high, uint32_t (&a)[4]) {
  if constexpr (Bits == 4) {
    const uint32_t w = word_of<J>(q);
#pragma unroll
    for (int s = 0; s < 4; ++s)
      a[s] =
          bits_of(__hsub2(bf16x2_of(q4_biased_pair(w, s)), bf16x2_of(register_is_high_row(s) ? zero_high : zero_low)));
  } else {
    const uint32_t w0 = word_of<2 * J>(q), w1 = word_of<2 * J + 1>(q);
    const float z_low = __uint_as_float(zero_low), z_high = __uint_as_float(zero_high);
    // Registers 0, 1 from w0 (a0 a1 | a2 a3), 2, 3 from w1 (a4 a5 | a6 a7); odd registers hold row groupID + 8.
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint32_t w = s < 2 ? w0 : w1;
      const int k = (s & 1) * 2;
      const float z = register_is_high_row(s) ? z_high : z_low;
      a[s] = bits_of(__floats2bfloat162_rn(__uint_as_float(q8_biased_f32(w, k)) - z,
                                           __uint_as_float(q8_biased_f32(w, k + 1)) - z));
    }
  }
}

// x[token][4t .. 4t + 3] of k-tile `ktile` (the inputs of this lane's B fragment, t = lane % 4), or zeros for a
// lane whose token is past n_tokens.
__device__ __forceinline__ float4 b_inputs(const float* x_row, bool active, int32_t ktile, int lane) {
  return active ? __ldg(reinterpret_cast<const float4*>(x_row + ktile * tile_inputs + b_input(lane, 0)))
                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// The B fragment from b_inputs: b0 b1 (k indices 2t, 2t + 1) and b2 b3 (2t + 8, 2t + 9) rounded to bf16.
__device__ __forceinline__ void b_fragment(const float4& v, uint32_t (&b)[2]) {
  b[0] = bits_of(__floats2bfloat162_rn(v.x, v.y));
  b[1] = bits_of(__floats2bfloat162_rn(v.z, v.w));
}

// One group's scales and zero points of the rows groupID and groupID + 8 of a row tile, as loaded.
struct group_params {
  float scale_low, scale_high;
  uint32_t zero_low, zero_high;
};

__device__ __forceinline__ group_params load_group(const weight_view& w, bool tile_valid, int64_t tile, int32_t group,
                                                   int row_in_tile) {
  if (!tile_valid || group >= w.layout.n_groups)
    return {0.0f, 0.0f, 0, 0};
  const int64_t at = group_record(w.layout, tile, group) + row_in_tile;
  return {__ldg(w.scales + at), __ldg(w.scales + at + 8), __ldg(w.zeros + at), __ldg(w.zeros + at + 8)};
}

template <int Bits, int R>
__global__ void __launch_bounds__(gemv_threads, 2)
    quantized_gemv_kernel(weight_view w, const float* __restrict__ x, int n_tokens, const float* __restrict__ bias,
                          float* __restrict__ y) {
  constexpr int tiles = tiles_per_chunk(Bits);
  const gemv_layout& l = w.layout;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int row_in_tile = lane >> 2;  // groupID: the D rows row_in_tile and row_in_tile + 8
  const int first_tile = static_cast<int>(blockIdx.x) * R;

  float total[R][4] = {};
  const chunk_range range = warp_chunks(l.n_chunks, warp);
  if (range.begin < range.end) {
    bool tile_valid[R];
    const uint8_t* codes[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      tile_valid[r] = first_tile + r < l.n_row_tiles;
      codes[r] = w.codes + chunk_offset(l, tile_valid[r] ? first_tile + r : 0, 0) + lane * lane_bytes;
    }
    const bool active = b_token(lane) < n_tokens;
    const float* x_row = x + static_cast<int64_t>(active ? b_token(lane) : 0) * l.n_in;

    // The current group's scales and zero points (zeros in the form the bit width subtracts), and the next group's
    // as loaded one group ahead, so that a group boundary does not wait on a load.
    float sum[R][4] = {};
    float scale_low[R], scale_high[R];
    uint32_t zero_low[R], zero_high[R];
    group_params next[R];
    group_cursor cursor = group_at(range.begin * tiles, l.tiles_per_group);
#pragma unroll
    for (int r = 0; r < R; ++r)
      next[r] = load_group(w, tile_valid[r], first_tile + r, cursor.group, row_in_tile);
    auto take_next = [&] {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        scale_low[r] = next[r].scale_low;
        scale_high[r] = next[r].scale_high;
        zero_low[r] = Bits == 4 ? q4_zero_pair(next[r].zero_low) : q8_zero_f32(next[r].zero_low);
        zero_high[r] = Bits == 4 ? q4_zero_pair(next[r].zero_high) : q8_zero_f32(next[r].zero_high);
        next[r] = load_group(w, tile_valid[r], first_tile + r, cursor.group + 1, row_in_tile);
      }
    };
    take_next();

    for (int32_t c = range.begin; c < range.end; c += gemv_chunks_in_flight) {
      uint4 q[gemv_chunks_in_flight][R];
#pragma unroll
      for (int u = 0; u < gemv_chunks_in_flight; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r)
          q[u][r] = c + u < range.end && tile_valid[r]
                        ? load_codes(codes[r] + static_cast<int64_t>(c + u) * chunk_bytes)
                        : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < gemv_chunks_in_flight; ++u) {
        if (c + u >= range.end)
          continue;
        const int32_t first_ktile = (c + u) * tiles;
        float4 xv[tiles];  // the chunk's B inputs, loaded before any of its k-tiles needs them
#pragma unroll
        for (int j = 0; j < tiles; ++j)
          xv[j] = b_inputs(x_row, active && first_ktile + j < l.n_ktiles, first_ktile + j, lane);
        auto k_tile = [&](auto j_tag) {
          constexpr int J = decltype(j_tag)::value;
          const int32_t ktile = first_ktile + J;
          if (ktile >= l.n_ktiles)
            return;
          if (group_advance(cursor, ktile, l.tiles_per_group)) {
#pragma unroll
            for (int r = 0; r < R; ++r)
              finish_group(total[r], sum[r], scale_low[r], scale_high[r]);
            take_next();
          }
          uint32_t b[2];
          b_fragment(xv[J], b);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            uint32_t a[4];
            a_fragment<Bits, J>(q[u][r], zero_low[r], zero_high[r], a);
            mma_bf16(sum[r], a, b);
          }
        };
        k_tile(std::integral_constant<int, 0>{});
        k_tile(std::integral_constant<int, 1>{});
        if constexpr (tiles == 4) {
          k_tile(std::integral_constant<int, 2>{});
          k_tile(std::integral_constant<int, 3>{});
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
      finish_group(total[r], sum[r], scale_low[r], scale_high[r]);
  }

  // The warps' totals, added in warp order.
  __shared__ float partial[gemv_warps][R][4][32];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      partial[warp][r][i][lane] = total[r][i];
  __syncthreads();
  for (int idx = static_cast<int>(threadIdx.x); idx < R * 4 * 32; idx += gemv_threads) {
    const int r = idx / 128, i = (idx / 32) % 4, from_lane = idx % 32;
    const int64_t row = static_cast<int64_t>(first_tile + r) * tile_rows + d_row(from_lane, i);
    const int token = d_token(from_lane, i);
    if (row >= l.n_out || token >= n_tokens)
      continue;
    float v = 0.0f;
#pragma unroll
    for (int k = 0; k < gemv_warps; ++k)
      v += partial[k][r][i][from_lane];
    y[static_cast<int64_t>(token) * l.n_out + row] = bias != nullptr ? v + bias[row] : v;
  }
}

// One thread per 32-bit word of the codes of rows [row_begin, row_begin + n_rows): its eight (4-bit) or four (8-bit)
// codes as bf16 pairs of neighbouring inputs of one row (a0 a1, a2 a3, ...), written 4 bytes at a time.
template <int Bits>
__global__ void dequantize_kernel(weight_view w, int64_t row_begin, int64_t n_rows, __nv_bfloat162* __restrict__ out) {
  const gemv_layout& l = w.layout;
  constexpr int tiles = tiles_per_chunk(Bits);
  const int64_t first_tile = row_begin / tile_rows;
  const int64_t n_tiles = (n_rows + tile_rows - 1) / tile_rows;
  const int64_t words_per_tile = static_cast<int64_t>(l.n_chunks) * (chunk_bytes / 4);
  const int64_t n_words = n_tiles * words_per_tile;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n_words; idx += stride) {
    const int64_t tile = first_tile + idx / words_per_tile;
    const int64_t rest = idx % words_per_tile;
    const int64_t chunk = rest / (chunk_bytes / 4);
    const int lane = static_cast<int>(rest % (chunk_bytes / 4)) / 4, word = static_cast<int>(rest % 4);
    const int j = Bits == 4 ? word : word / 2;  // the word's k-tile
    const int64_t ktile = chunk * tiles + j;
    if (ktile >= l.n_ktiles)
      continue;
    const uint32_t bits =
        __ldg(reinterpret_cast<const uint32_t*>(w.codes + chunk_offset(l, tile, chunk)) + lane * 4 + word);
    const int64_t group = ktile / l.tiles_per_group;
    // 4-bit: the word holds a0..a7 (registers s = 0..3); 8-bit: word 2j holds a0..a3, word 2j + 1 a4..a7.
    const int first_e = Bits == 4 ? 0 : (word % 2) * 4;
    const int n_pairs = Bits == 4 ? 4 : 2;
    for (int p = 0; p < n_pairs; ++p) {
      const int e = first_e + 2 * p;
      const int64_t row = tile * tile_rows + a_row(lane, e);
      if (row < row_begin || row >= row_begin + n_rows || row >= l.n_out)
        continue;
      const int64_t at = group_record(l, tile, group) + a_row(lane, e);
      const float scale = __ldg(w.scales + at);
      const int zero = __ldg(w.zeros + at);
      float v[2];
      for (int h = 0; h < 2; ++h) {
        const code_place place = place_in_chunk(Bits, lane, j, e + h);
        const int byte_in_word = place.byte % 4;
        const int code = static_cast<int>((bits >> (8 * byte_in_word + place.shift)) & ((1u << Bits) - 1));
        v[h] = static_cast<float>(code - zero) * scale;
      }
      const int64_t col = ktile * tile_inputs + a_input(lane, e);  // even: a pair never straddles a 4-byte word
      out[((row - row_begin) * l.n_in + col) / 2] = __floats2bfloat162_rn(v[0], v[1]);
    }
  }
}

}  // namespace

void quantized_gemv(const weight_view& w, const gemv_launch& launch, const float* x, int64_t n_tokens,
                    const float* bias, float* y, cudaStream_t stream) {
  if (n_tokens <= 0 || w.layout.n_out <= 0 || launch.blocks == 0)
    return;
  const int n = static_cast<int>(n_tokens);
  const bool four = w.layout.bits == 4;
  if (launch.row_tiles_per_block == 2) {
    if (four)
      quantized_gemv_kernel<4, 2><<<launch.blocks, gemv_threads, 0, stream>>>(w, x, n, bias, y);
    else
      quantized_gemv_kernel<8, 2><<<launch.blocks, gemv_threads, 0, stream>>>(w, x, n, bias, y);
  } else {
    if (four)
      quantized_gemv_kernel<4, 1><<<launch.blocks, gemv_threads, 0, stream>>>(w, x, n, bias, y);
    else
      quantized_gemv_kernel<8, 1><<<launch.blocks, gemv_threads, 0, stream>>>(w, x, n, bias, y);
  }
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

void dequantize_rows(const weight_view& w, int64_t row_begin, int64_t n_rows, void* out, cudaStream_t stream) {
  const int64_t n_tiles = (n_rows + tile_rows - 1) / tile_rows;
  const grid_1d g = elementwise_grid(n_tiles * w.layout.n_chunks * (chunk_bytes / 4));
  if (g.blocks == 0)
    return;
  auto* dst = static_cast<__nv_bfloat162*>(out);
  if (w.layout.bits == 4)
    dequantize_kernel<4><<<g.blocks, g.threads, 0, stream>>>(w, row_begin, n_rows, dst);
  else
    dequantize_kernel<8><<<g.blocks, g.threads, 0, stream>>>(w, row_begin, n_rows, dst);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace actorllm::cuda
