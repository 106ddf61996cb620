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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>

namespace actorllm::cuda::gemv {

/// Rows of x one launch serves: the size rule sends M <= max_rows to the GEMV, larger M to cuBLAS.
inline constexpr int max_rows = 8;
/// bf16 weights per 128-bit load: a chunk.
inline constexpr int chunk_inputs = 8;
/// Lanes of a warp; a warp step reads warp_lanes consecutive chunks of one row (512 bytes, coalesced).
inline constexpr int warp_lanes = 32;
/// Warps per block, each on its own output.
inline constexpr int warps_per_block = 4;
/// Chunks a lane may load before it does any math on them (tuning::loads_in_flight): the kernel is built for each.
inline constexpr int loads_in_flight_choices[] = {4, 8, 16, 32};
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

/// How the GEMV runs, one setting per process (cuda::gemv_tuning): the chunks a lane loads before it folds any (the
/// fold order, and so every bit of the result, is the same for all), the most rows of x it takes, and the largest
/// weight (n_out x n_in elements) it takes in matmul and matmul_group; the rest goes to cuBLAS (max_rows 0: all of
/// it; max_elements -1: any size). All three only move speed. The defaults are what an H200 measured on 2026-11-30
/// (bench_gpu --gemv-sweep, each call in a CUDA graph, cuBLAS's conversion of an f32 x counted):
/// - loads: 4 fastest at every shape and row count (4096 -> 4096 at one row: 13.8 us; 8: 15.0, 16: 18.1, 32: 26.2),
///   and in the 8B's batch-1 decode with graphs (170.6 tokens/s; 8: 162.8, 16: 152.4, 32: 101.3);
/// - rows: at 2 rows and more cuBLAS was 1.6 to 7 times faster on every shape (4096 -> 4096 at 2 rows: 14.6 against
///   23.1 us), since each warp re-reads every row of x;
/// - elements: any size. Single calls favoured cuBLAS above 4096 x 4096 at one row (q|k|v 4096 -> 6144: 20.7 against
///   17.0 us; gate|up 4096 -> 28672: 69.5 against 62.3; down 14336 -> 4096: 40.6 against 33.7), but the 8B's
///   batch-1 decode with graphs ran slower with that rule: 172.7 tokens/s against 179.5 with the GEMV at any size
///   (gpu_check's gemv_rule, H200, 2026-12-04, same run), so the GEMV takes every weight at one row.
struct tuning {
  int loads_in_flight = 4;
  int max_rows = 1;
  int64_t max_elements = -1;
};

/// A tuning from its text, "loads=N,rows=M,elements=E" (E a count or "all"; any may be left out: the default stays):
/// the ACTORLLM_GEMV environment variable's form. Throws std::invalid_argument naming the field and what was wrong.
inline tuning parse_tuning(const std::string& text) {
  tuning t;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    if (eq == std::string::npos || (key != "loads" && key != "rows" && key != "elements"))
      throw std::invalid_argument("ACTORLLM_GEMV: '" + item + "' is not loads=N, rows=N or elements=N");
    const std::string value = item.substr(eq + 1);
    const size_t longest = key == "elements" ? 15 : 3;
    const bool digits =
        !value.empty() && value.size() <= longest && value.find_first_not_of("0123456789") == std::string::npos;
    const int64_t n = digits ? std::stoll(value) : -1;
    if (key == "loads") {
      if (std::find(std::begin(loads_in_flight_choices), std::end(loads_in_flight_choices), n) ==
          std::end(loads_in_flight_choices))
        throw std::invalid_argument("ACTORLLM_GEMV: loads must be 4, 8, 16 or 32, not '" + value + "'");
      t.loads_in_flight = static_cast<int>(n);
    } else if (key == "rows") {
      if (n < 0 || n > max_rows)
        throw std::invalid_argument("ACTORLLM_GEMV: rows must be 0 to " + std::to_string(max_rows) + ", not '" + value +
                                    "'");
      t.max_rows = static_cast<int>(n);
    } else {
      if (value != "all" && n < 0)
        throw std::invalid_argument("ACTORLLM_GEMV: elements must be a count or 'all', not '" + value + "'");
      t.max_elements = value == "all" ? -1 : n;
    }
    at = end + 1;
  }
  return t;
}

/// Whether the tuning lets the GEMV take a weight of `elements` (n_out x n_in) in matmul and matmul_group.
inline bool takes_weight_of(int64_t elements, const tuning& t) {
  return t.max_elements < 0 || elements <= t.max_elements;
}

/// Whether the GEMV takes a problem: 1..max_rows rows of x (the tuning's limit, at most gemv::max_rows), n_in a
/// positive multiple of chunk_inputs, and every pointer it loads 128 bits at a time from 16-byte aligned (weights and
/// x rows then stay aligned row after row).
inline bool takes(int64_t rows, int64_t n_in, const void* w, const void* x, int rows_limit = max_rows) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return rows >= 1 && rows <= std::min(rows_limit, max_rows) && n_in > 0 && n_in % chunk_inputs == 0 && aligned(w) &&
         aligned(x);
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
