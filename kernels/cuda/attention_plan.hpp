// The launch plan of the CUDA paged attention, derived on the host from the step's batch (pure C++: no CUDA
// runtime call, so CI tests it without a GPU). The backend plans once per step and layer shape, grows its device
// workspace to `workspace_bytes` and hands the plan to cuda::paged_attention.
//
// Kernel layout (kernels/cuda/paged_attention.cu): one CTA per (query row, kv head, head chunk, partition). A CTA
// runs the query heads of one GQA group (up to `head_chunk` of them) over one partition of the row's cache range,
// so each K/V row it loads serves the whole group. Rows are split into partitions (flash-decoding) only when the
// grid would not fill the GPU otherwise; a merge kernel then combines the partitions by log-sum-exp.
#pragma once

#include <cstdint>

namespace actorllm::cuda {

/// What the plan needs to know about the GPU. Defaults: an H100 SXM (132 SMs) and the 48 KiB of shared memory a
/// block gets without opting in.
struct device_limits {
  int64_t sm_count = 132;
  int64_t max_shared_bytes_per_block = 48 * 1024;
};

/// Shapes of one paged_attention call. The cache is [cache_blocks, block_size, n_head_kv, head_dim].
struct attention_geometry {
  int64_t n_tokens = 0;  ///< query rows of the batch
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  ///< a multiple of 32 in [32, 256]
  int64_t block_size = 0;
  int64_t window = 0;  ///< sliding window (> 0) or none (<= 0)
};

/// Whether rows are split into partitions (flash-decoding): by the plan's rule, never, or always (tests).
enum class split_policy { automatic, never, always };

/// Knobs for tests and tuning; the defaults are what the backend uses.
struct attention_plan_options {
  split_policy split = split_policy::automatic;
  /// Cache positions per partition when split; 0 lets the plan choose (512, halved down to 128 while the grid
  /// is smaller than the GPU).
  int64_t partition_size = 0;
};

/// Threads of the attention kernel's CTA (4 warps) and cache positions per tile (scores of a tile sit in shared
/// memory). The kernels are compiled with these constants.
inline constexpr int64_t attention_threads = 128;
inline constexpr int64_t attention_warps = attention_threads / 32;
inline constexpr int64_t attention_tile = 64;
inline constexpr int64_t attention_merge_threads = 128;

/// Query heads one CTA handles (a GQA group is cut into chunks of this size): 8 up to head_dim 128, 4 above, which
/// bounds the per-thread accumulators at 32 floats.
constexpr int64_t attention_head_chunk(int64_t head_dim) { return head_dim <= 128 ? 8 : 4; }

/// Static shared memory of the attention kernel for head_dim: the tile's scores, the softmax state per head and the
/// cross-warp reduction of the accumulators.
constexpr int64_t attention_shared_bytes(int64_t head_dim) {
  const int64_t chunk = attention_head_chunk(head_dim);
  return 4 * (chunk * attention_tile + 3 * chunk + attention_warps * chunk * head_dim) + 4 * 8;
}

/// Whether the kernels are compiled for head_dim.
constexpr bool attention_head_dim_supported(int64_t head_dim) {
  return head_dim >= 32 && head_dim <= 256 && head_dim % 32 == 0;
}

/// A derived launch plan. Grids are (x, y, z).
struct attention_plan {
  attention_geometry geometry;
  int64_t n_seqs = 0;
  int64_t cache_limit = 0;  ///< most cache positions one row of the batch can read: min(window, longest table)

  int64_t head_chunk = 0;     ///< query heads per CTA
  int64_t n_head_chunks = 0;  ///< CTAs per kv head along y
  bool split = false;
  int64_t partition_size = 0;  ///< cache positions per partition (when not split: cache_limit, at least 1)
  int64_t n_partitions = 1;    ///< grid z; partitions past a row's range exit at once

  int64_t grid[3] = {0, 1, 1};  ///< (n_tokens, n_head_kv * n_head_chunks, n_partitions)
  int64_t threads = attention_threads;
  int64_t shared_bytes = 0;

  int64_t merge_grid[2] = {0, 1};  ///< (n_tokens, n_head): launched only when split
  int64_t merge_threads = attention_merge_threads;
  int64_t merge_shared_bytes = 0;  ///< dynamic: one weight per partition, rounded up to whole 16-byte vectors

  /// Split-K partials in the workspace, f32: acc [n_tokens, n_head, n_partitions, head_dim] (unnormalised), then
  /// max and sum [n_tokens, n_head, n_partitions]. 0 when not split.
  int64_t workspace_bytes = 0;
  int64_t workspace_max_offset = 0;  ///< byte offset of the max array
  int64_t workspace_sum_offset = 0;  ///< byte offset of the sum array

  /// Sequences with at least this many query rows are left to the tensor-core prefill kernel (prefill_attention.hpp):
  /// the per-row and merge kernels skip their rows. 0: none (the default; the backend sets it when it launches that
  /// kernel too).
  int64_t rows_fused_from = 0;
  /// Nothing to launch (no rows or no sequences).
  bool empty() const { return geometry.n_tokens == 0 || n_seqs == 0; }
};

/// The plan for one call, from the host copy of the batch's sequences: host_seqs [n_seqs * 4] (query_begin,
/// n_query, first block-table entry, n_blocks; attention_batch::host_seqs) and the number of block-table entries
/// (the entries themselves are not read: those before a window may be stale). Plain pointers, not spans, because
/// the .cu files that include this header are C++17. Throws std::invalid_argument naming the field for a head_dim
/// the kernels lack, n_head not a multiple of n_head_kv, a sequence outside the batch, or a grid past CUDA's
/// limits.
attention_plan plan_paged_attention(const attention_geometry& geometry, const int32_t* host_seqs, int64_t n_seqs,
                                    int64_t n_block_table_entries, const device_limits& limits = {},
                                    const attention_plan_options& options = {});

}  // namespace actorllm::cuda
