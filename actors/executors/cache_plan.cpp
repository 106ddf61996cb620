// KV-cache sizing.
#include "actors/executors/cache_plan.hpp"

#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

namespace actorllm::actors {

namespace {

// The blocks each GPU holds for the KV cache (vLLM's gpu_memory_utilization rule), the fewest over the GPUs.
int64_t gpu_blocks(const std::vector<proto::shard_profile>& profiles, double utilization, std::string& error) {
  struct gpu {
    uint64_t total = 0, used = 0, in_use = 0, peak = 0, bytes_per_block = 0;
  };
  std::map<std::string, gpu> gpus;
  for (const auto& p : profiles) {
    gpu& g = gpus[p.device];
    g.total = p.device_total;
    g.used = std::max(g.used, p.device_used);
    g.in_use += p.in_use;
    g.peak += std::max(p.peak_in_use, p.in_use);
    g.bytes_per_block += p.bytes_per_block;
  }
  int64_t n_blocks = std::numeric_limits<int32_t>::max();
  for (const auto& [name, g] : gpus) {
    const double allowed = static_cast<double>(g.total) * utilization;
    const double others = g.used > g.in_use ? static_cast<double>(g.used - g.in_use) : 0.0;
    const double budget = allowed - others - static_cast<double>(g.peak);
    const int64_t fit =
        budget > 0 && g.bytes_per_block > 0 ? static_cast<int64_t>(budget / static_cast<double>(g.bytes_per_block)) : 0;
    log::info("kv_cache",
              "{}: {:.2f} GiB x gpu_memory_utilization {} = {:.2f} GiB; weights and activations peak at {:.2f} GiB, "
              "others use {:.2f} GiB: {:.2f} GiB left for the KV cache",
              name, g.total / 1073741824.0, utilization, allowed / 1073741824.0, g.peak / 1073741824.0,
              others / 1073741824.0, std::max(budget, 0.0) / 1073741824.0);
    if (fit < 1) {
      error = fmt::format(
          "no KV-cache block fits on {}: {} bytes x gpu_memory_utilization {} leaves {:.0f} bytes after {} bytes of "
          "weights and activations and {:.0f} bytes used by others, and a block takes {} bytes there; increase "
          "--gpu-memory-utilization or use more GPUs",
          name, g.total, utilization, std::max(budget, 0.0), g.peak, others, g.bytes_per_block);
      return 0;
    }
    n_blocks = std::min(n_blocks, fit);
  }
  return n_blocks;
}

}  // namespace

cache_plan plan_cache(const std::vector<proto::shard_profile>& profiles, int32_t block_size, uint64_t kv_cache_memory,
                      int32_t max_model_len, double gpu_memory_utilization) {
  cache_plan plan;
  if (profiles.empty()) {
    plan.error = "no shards to size the KV cache for";
    return plan;
  }
  const bool on_gpus =
      std::all_of(profiles.begin(), profiles.end(), [](const proto::shard_profile& p) { return p.device_total > 0; });
  int64_t n_blocks = std::numeric_limits<int32_t>::max();
  uint64_t max_bytes = 0;
  for (const auto& p : profiles)
    max_bytes = std::max(max_bytes, p.bytes_per_block);
  if (on_gpus) {
    n_blocks = gpu_blocks(profiles, gpu_memory_utilization, plan.error);
    if (!plan.error.empty())
      return plan;
  } else {
    for (const auto& p : profiles) {
      if (p.n_blocks_fit < 1) {
        plan.error = fmt::format(
            "kv_cache_memory of {} bytes holds no KV-cache block on stage {} rank {}, where a block "
            "of {} tokens takes {} bytes",
            kv_cache_memory, p.stage, p.tp_rank, block_size, p.bytes_per_block);
        return plan;
      }
      n_blocks = std::min(n_blocks, p.n_blocks_fit);
    }
  }
  plan.config.n_blocks = static_cast<int32_t>(n_blocks);
  plan.config.block_size = block_size;
  plan.config.max_bytes_per_block = max_bytes;
  if (plan.config.token_capacity() < max_model_len)
    plan.error = on_gpus
                     ? fmt::format(
                           "the model's max seq len ({}) is larger than the maximum number of tokens that can be "
                           "stored in the KV cache ({}: {} blocks of {}); increase --gpu-memory-utilization "
                           "(now {}) or decrease max_model_len",
                           max_model_len, plan.config.token_capacity(), n_blocks, block_size, gpu_memory_utilization)
                     : fmt::format(
                           "the model's max seq len ({}) is larger than the maximum number of tokens that can be "
                           "stored in the KV cache ({}: {} blocks of {}); increase kv_cache_memory (now {} bytes "
                           "per shard) or decrease max_model_len",
                           max_model_len, plan.config.token_capacity(), n_blocks, block_size, kv_cache_memory);
  return plan;
}

std::vector<std::string> cache_plan_lines(const proto::kv_cache_config& c, const cache_log_facts& f) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("# {} blocks: {}", f.device, c.n_blocks));
  lines.push_back(
      fmt::format("{} KV cache size: {} tokens ({} blocks of {}, {} bytes per block on the largest shard, "
                  "kv_cache_dtype {})",
                  f.device, c.token_capacity(), c.n_blocks, c.block_size, c.max_bytes_per_block, f.kv_cache_dtype));
  if (const int32_t shares = f.dcp_size * f.pcp_size; shares > 1)
    lines.push_back(fmt::format(
        "{}: each rank of a group keeps {} of every block's {} positions, 1/{} of each sequence's KV cache",
        f.pcp_size == 1   ? fmt::format("Decode context parallel size {}", f.dcp_size)
        : f.dcp_size == 1 ? fmt::format("Prefill context parallel size {}", f.pcp_size)
                          : fmt::format("Context parallel sizes: prefill {} x decode {}", f.pcp_size, f.dcp_size),
        c.block_size / shares, c.block_size, shares));
  lines.push_back(fmt::format("Maximum concurrency for {} tokens per request: {:.2f}x", f.max_model_len,
                              static_cast<double>(c.token_capacity()) / f.max_model_len));
  return lines;
}

void log_cache_plan(const proto::kv_cache_config& c, const cache_log_facts& f) {
  for (const std::string& line : cache_plan_lines(c, f))
    log::info("kv_cache", "{}", line);
}

}  // namespace actorllm::actors
