// Launch geometry of the simple kernels, as plain host arithmetic (unit-tested without a GPU). Every kernel that uses
// these loops grid-stride, so any grid at least one block wide covers its elements; the cap only bounds the grid.
#pragma once

#include <algorithm>
#include <cstdint>

namespace actorllm::cuda {

/// A one-dimensional launch.
struct grid_1d {
  unsigned blocks = 0;   ///< 0 when there is nothing to do (no launch)
  unsigned threads = 0;  ///< threads per block
};

/// Threads per block of the elementwise kernels.
inline constexpr int elementwise_threads = 256;
/// At most this many blocks: 132 SMs × 16 resident blocks of 256 threads on an H100 is ~2k; a few waves more keep the
/// tail short without launching millions of blocks for the grid-stride loop to walk.
inline constexpr int64_t max_elementwise_blocks = 8192;

/// Grid of an elementwise kernel over n elements (each thread handles elements i, i + stride, ...).
constexpr grid_1d elementwise_grid(int64_t n, int threads = elementwise_threads,
                                   int64_t max_blocks = max_elementwise_blocks) {
  if (n <= 0)
    return {};
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, max_blocks);
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(threads)};
}

/// Threads per block of the row kernels (RMSNorm: one block per row; a block-wide reduction over warps) at most.
inline constexpr int row_threads = 1024;

/// One row per block: each thread takes `vector` consecutive elements at a time (4: 16-byte loads, when the width is
/// a multiple of 4 and every row pointer is 16-byte aligned), and the block has enough warps that a row of up to
/// 4096 floats is read in one pass, every load in flight at once: one block of a 4096-wide row at batch 1 is latency,
/// not a chain of 16 dependent loads per thread.
struct row_launch {
  unsigned threads = 0;   ///< a multiple of 32 in [32, row_threads]
  int vector = 1;         ///< elements per load: 1 or 4
  int cached_passes = 0;  ///< passes over the row (1..row_cached_passes_max), held in registers; 0: more, reread
};

/// The most passes a row kernel keeps in registers (rms_norm_math.hpp's norm::max_cached_passes).
inline constexpr int row_cached_passes_max = 4;

constexpr row_launch row_launch_of(int64_t width, bool aligned_16) {
  if (width <= 0)
    return {};
  const int vector = aligned_16 && width % 4 == 0 ? 4 : 1;
  const int64_t lanes = (width + vector - 1) / vector;  // threads that would each do one load
  const int64_t threads = std::clamp<int64_t>((lanes + 31) / 32 * 32, 32, row_threads);
  const int64_t passes = (lanes + threads - 1) / threads;
  return {static_cast<unsigned>(threads), vector, passes <= row_cached_passes_max ? static_cast<int>(passes) : 0};
}
/// Rows per launch of a one-block-per-row kernel: gridDim.x may be up to 2^31 - 1, far above any batch.
inline constexpr int64_t max_grid_x = 2147483647;

/// Warps per block of the per-head kernels (RoPE: one warp per (token, head)).
inline constexpr int head_warps_per_block = 4;

/// Grid of a one-warp-per-item kernel over n items.
constexpr grid_1d warp_per_item_grid(int64_t n, int warps_per_block = head_warps_per_block) {
  if (n <= 0)
    return {};
  return {static_cast<unsigned>((n + warps_per_block - 1) / warps_per_block),
          static_cast<unsigned>(32 * warps_per_block)};
}

}  // namespace actorllm::cuda
