// The bf16-weight GEMV's arithmetic (kernels/cuda/gemv.cu) as __host__ __device__ functions: which 16-byte chunks of
// a weight row each lane of a warp reads, the order in which a lane folds a chunk into its f32 sums, the warp's
// butterfly reduction and the epilogues. The kernel calls exactly these; tests/kernels/cuda/gemv_math_test.cpp runs
// the same lanes on the CPU (emulate_output below) against a float64 reference. A C++17 header (nvcc compiles .cu
// files as C++17).
//
// One warp computes one output o for every row of x (up to max_rows): lane l reads chunks l, l + 32, l + 64, ... of
// the weight row (chunk c = inputs [8c, 8c + 8), one 128-bit load), each once for all rows of x, and for every row r
// folds it into its sum s_r with eight fmas in input order (x rounded to bf16 first, as every backend's bf16 matmul).
// The 32 lanes' sums then meet in a butterfly (xor 16, 8, 4, 2, 1), which gives every lane the same total, and lane r
// writes row r's output.
#pragma once

#include "kernels/cuda/host_device.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace actorllm::cuda::gemv {

/// Rows of x one launch serves: the size rule sends M <= max_rows to the GEMV, larger M to cuBLAS.
inline constexpr int max_rows = 8;
/// bf16 weights per 128-bit load: a chunk.
inline constexpr int chunk_inputs = 8;
/// Lanes of a warp; a warp step reads warp_lanes consecutive chunks of one row (512 bytes, coalesced).
inline constexpr int warp_lanes = 32;
/// Warps per block, each on its own output.
inline constexpr int warps_per_block = 4;
/// Chunks a lane loads before it does any math on them: enough bytes in flight per SM to cover DRAM latency.
inline constexpr int chunks_in_flight = 4;
/// Outputs of one grouped launch (q, k, v).
inline constexpr int max_outputs = 3;

/// What the GEMV computes per output.
enum class epilogue : uint8_t {
  linear,     ///< y = x w^T (+ bias)
  silu_gate,  ///< out = silu(x w_gate^T) * (x w_up^T), two weights read by the same warp
};

/// A bf16 (its 16 bits) as f32: exact.
ACTORLLM_HOST_DEVICE inline float bf16_bits_to_f32(uint16_t bits) {
  return bits_float(static_cast<uint32_t>(bits) << 16);
}

/// f32 rounded to bf16 (nearest, ties to even; NaN stays NaN) and widened back: what every backend multiplies bf16
/// weights by (kernels/dtype.hpp's f32_to_bf16; __float2bfloat16_rn on the device gives the same bits).
ACTORLLM_HOST_DEVICE inline float round_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    u |= 0x00400000u;  // quiet NaN
  else
    u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_bits_to_f32(static_cast<uint16_t>(u >> 16));
}

/// The eight weights of a chunk from the four 32-bit words a 128-bit load gives: element 2j in the low half of word j
/// (little-endian), 2j + 1 in the high half.
ACTORLLM_HOST_DEVICE inline void unpack_chunk(const uint32_t (&words)[4], float (&w)[chunk_inputs]) {
  for (int j = 0; j < 4; ++j) {
    w[2 * j] = bf16_bits_to_f32(static_cast<uint16_t>(words[j] & 0xffffu));
    w[2 * j + 1] = bf16_bits_to_f32(static_cast<uint16_t>(words[j] >> 16));
  }
}

/// A lane's sum after one more chunk: sum = fma(w[k], x[k], sum) for k = 0..7, in that order.
ACTORLLM_HOST_DEVICE inline float fold_chunk(const float (&w)[chunk_inputs], const float (&x)[chunk_inputs],
                                             float sum) {
  for (int k = 0; k < chunk_inputs; ++k)
#ifdef __CUDA_ARCH__
    sum = __fmaf_rn(w[k], x[k], sum);
#else
    sum = std::fma(w[k], x[k], sum);
#endif
  return sum;
}

/// Chunks of a row of n_in inputs (n_in a multiple of chunk_inputs).
ACTORLLM_HOST_DEVICE constexpr int64_t chunks_of(int64_t n_in) { return n_in / chunk_inputs; }

/// The butterfly step of lanes l and l ^ offset: both get a + b (the same float: addition commutes).
ACTORLLM_HOST_DEVICE inline float butterfly_add(float mine, float other) { return mine + other; }

/// silu(g) * u in the order of the elementwise kernel and the CPU: g * u / (1 + exp(-g)).
ACTORLLM_HOST_DEVICE inline float silu_times(float g, float u) { return g * u / (1.0f + expf(-g)); }

/// The linear epilogue: the sum plus the bias when there is one.
ACTORLLM_HOST_DEVICE inline float linear_output(float sum, const float* bias, int64_t o) {
  return bias != nullptr ? sum + bias[o] : sum;
}

/// Whether the GEMV takes a problem: 1..max_rows rows of x, n_in a positive multiple of chunk_inputs, and every
/// pointer it loads 128 bits at a time from 16-byte aligned (weights and x rows then stay aligned row after row).
inline bool takes(int64_t rows, int64_t n_in, const void* w, const void* x) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return rows >= 1 && rows <= max_rows && n_in > 0 && n_in % chunk_inputs == 0 && aligned(w) && aligned(x);
}

/// Blocks of a launch over n_outputs outputs (summed over a group's weights).
constexpr int64_t blocks_for(int64_t n_outputs) { return (n_outputs + warps_per_block - 1) / warps_per_block; }

/// The warp's total for one output on the CPU, lane by lane as the kernel runs it: w_row bf16 bits [n_in], x_row
/// f32 [n_in], rounded to bf16 as the kernel loads it (a bf16 x widens to the same values). Lane l folds chunks l,
/// l + 32, ... in that order; then the butterfly.
inline float emulate_output(const uint16_t* w_row, const float* x_row, int64_t n_in) {
  float lane_sum[warp_lanes] = {};
  for (int lane = 0; lane < warp_lanes; ++lane) {
    for (int64_t c = lane; c < chunks_of(n_in); c += warp_lanes) {
      uint32_t words[4];
      std::memcpy(words, w_row + c * chunk_inputs, sizeof words);
      float w[chunk_inputs], x[chunk_inputs];
      unpack_chunk(words, w);
      for (int k = 0; k < chunk_inputs; ++k)
        x[k] = round_to_bf16(x_row[c * chunk_inputs + k]);
      lane_sum[lane] = fold_chunk(w, x, lane_sum[lane]);
    }
  }
  for (int offset = warp_lanes / 2; offset > 0; offset /= 2) {
    float next[warp_lanes];
    for (int lane = 0; lane < warp_lanes; ++lane)
      next[lane] = butterfly_add(lane_sum[lane], lane_sum[lane ^ offset]);
    std::memcpy(lane_sum, next, sizeof next);
  }
  return lane_sum[0];
}

}  // namespace actorllm::cuda::gemv
