// The paged-attention launch plan: argument checks (mirroring cpu_backend's), grid geometry and the split rule.
#include "kernels/cuda/attention_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace actorllm::cuda {
namespace {

constexpr int64_t max_grid_yz = 65535;
constexpr int64_t max_grid_x = std::numeric_limits<int32_t>::max();
// Partition sizes the automatic rule picks from (vLLM's v2 kernel uses 512).
constexpr int64_t default_partition = 512;
constexpr int64_t min_auto_partition = 128;

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("paged_attention plan: " + what); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_geometry(const attention_geometry& g) {
  if (g.n_tokens < 0 || g.n_tokens > max_grid_x)
    fail(fmt::format("n_tokens {} outside [0, {}]", g.n_tokens, max_grid_x));
  if (g.n_head_kv <= 0)
    fail(fmt::format("n_head_kv {} must be positive", g.n_head_kv));
  if (g.n_head <= 0 || g.n_head % g.n_head_kv != 0)
    fail(fmt::format("n_head {} is not a positive multiple of n_head_kv {}", g.n_head, g.n_head_kv));
  if (g.n_head > max_grid_yz)
    fail(fmt::format("n_head {} above {}", g.n_head, max_grid_yz));
  if (!attention_head_dim_supported(g.head_dim))
    fail(fmt::format("head_dim {} is not supported (a multiple of 32 in [32, 256])", g.head_dim));
  if (g.block_size <= 0 || g.block_size > std::numeric_limits<int32_t>::max())
    fail(fmt::format("block_size {} outside [1, {}]", g.block_size, std::numeric_limits<int32_t>::max()));
}

}  // namespace

attention_plan plan_paged_attention(const attention_geometry& geometry, const int32_t* host_seqs, int64_t n_seqs,
                                    int64_t n_block_table_entries, const device_limits& limits,
                                    const attention_plan_options& options) {
  check_geometry(geometry);
  if (n_seqs < 0 || n_seqs > std::numeric_limits<int32_t>::max() || (n_seqs > 0 && host_seqs == nullptr))
    fail(fmt::format("n_seqs {} with host_seqs {}", n_seqs, host_seqs == nullptr ? "null" : "given"));
  if (n_block_table_entries < 0)
    fail(fmt::format("n_block_table_entries {} is negative", n_block_table_entries));
  if (limits.sm_count <= 0)
    fail(fmt::format("limits.sm_count {} must be positive", limits.sm_count));
  if (options.partition_size < 0)
    fail(fmt::format("options.partition_size {} is negative", options.partition_size));

  attention_plan plan;
  plan.geometry = geometry;
  plan.n_seqs = n_seqs;
  const int64_t n_table = n_block_table_entries;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int32_t* e = host_seqs + s * 4;
    if (e[0] < 0 || e[1] < 0 || e[0] + static_cast<int64_t>(e[1]) > geometry.n_tokens || e[2] < 0 || e[3] < 0 ||
        e[2] + static_cast<int64_t>(e[3]) > n_table)
      fail(
          fmt::format("host_seqs: sequence {} (rows {}+{}, blocks {}+{}) outside the batch ({} rows, {} "
                      "block-table entries)",
                      s, e[0], e[1], e[2], e[3], geometry.n_tokens, n_table));
    if (e[1] == 0)
      continue;
    const int64_t capacity = static_cast<int64_t>(e[3]) * geometry.block_size;
    plan.cache_limit =
        std::max(plan.cache_limit, geometry.window > 0 ? std::min<int64_t>(geometry.window, capacity) : capacity);
  }

  const int64_t n_rep = geometry.n_head / geometry.n_head_kv;
  plan.head_chunk = std::min(attention_head_chunk(geometry.head_dim), n_rep);
  plan.n_head_chunks = ceil_div(n_rep, plan.head_chunk);
  if (geometry.n_head_kv * plan.n_head_chunks > max_grid_yz)
    fail(fmt::format("n_head_kv {} x {} head chunks above {}", geometry.n_head_kv, plan.n_head_chunks, max_grid_yz));
  plan.shared_bytes = attention_shared_bytes(geometry.head_dim);
  if (plan.shared_bytes > limits.max_shared_bytes_per_block)
    fail(fmt::format("head_dim {} needs {} bytes of shared memory, above the device's {}", geometry.head_dim,
                     plan.shared_bytes, limits.max_shared_bytes_per_block));

  // Split when the grid leaves SMs idle and a row reads more than one default partition; then halve the
  // partition (not below 128 positions) while the grid is still smaller than the GPU. A batch of decode rows at
  // b >= 17 with 8 kv heads never splits; b1 at 32K context splits into 64 partitions of 512.
  const int64_t base_ctas = geometry.n_tokens * geometry.n_head_kv * plan.n_head_chunks;
  const int64_t longest = std::max<int64_t>(plan.cache_limit, 1);
  switch (options.split) {
    case split_policy::never:
      plan.split = false;
      break;
    case split_policy::always:
      plan.split = true;
      break;
    case split_policy::automatic:
      plan.split = base_ctas < limits.sm_count && longest > default_partition;
      break;
  }
  if (plan.split) {
    plan.partition_size = options.partition_size > 0 ? options.partition_size : default_partition;
    if (options.partition_size == 0)
      while (plan.partition_size > min_auto_partition &&
             base_ctas * ceil_div(longest, plan.partition_size) < limits.sm_count)
        plan.partition_size /= 2;
    plan.n_partitions = ceil_div(longest, plan.partition_size);
    // The merge keeps one weight per partition in shared memory.
    while (plan.n_partitions * 4 > limits.max_shared_bytes_per_block || plan.n_partitions > max_grid_yz) {
      if (options.partition_size > 0)
        fail(fmt::format("options.partition_size {} gives {} partitions, more than the merge holds",
                         options.partition_size, plan.n_partitions));
      plan.partition_size *= 2;
      plan.n_partitions = ceil_div(longest, plan.partition_size);
    }
    // Rounded up to whole 16-byte vectors: ptxas merges the merge loop's remainder loads (up to three weights) into
    // one wider load that can run past the last weight. The first GPU run's memcheck caught it at 2 partitions: a
    // 12-byte read of an 8-byte allocation (the values past the end are never used, but the read is out of bounds).
    plan.merge_shared_bytes = ceil_div(plan.n_partitions, 4) * 16;
    plan.merge_grid[0] = geometry.n_tokens;
    plan.merge_grid[1] = geometry.n_head;
    const int64_t n_partials = geometry.n_tokens * geometry.n_head * plan.n_partitions;
    plan.workspace_max_offset = n_partials * geometry.head_dim * 4;
    plan.workspace_sum_offset = plan.workspace_max_offset + n_partials * 4;
    plan.workspace_bytes = plan.workspace_sum_offset + n_partials * 4;
  } else {
    plan.partition_size = std::min<int64_t>(longest, std::numeric_limits<int32_t>::max());  // positions are i32
    plan.n_partitions = 1;
  }
  plan.grid[0] = geometry.n_tokens;
  plan.grid[1] = geometry.n_head_kv * plan.n_head_chunks;
  plan.grid[2] = plan.n_partitions;
  return plan;
}

}  // namespace actorllm::cuda
