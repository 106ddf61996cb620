// The block manager actor.
#include "actors/runtime/block_manager_actor.hpp"

#include "actorllm/proto/error.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>

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
    log::info("block_manager",
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

namespace {

struct block_manager_state {
  block_manager_args args;
  std::optional<proto::kv_cache_config> config;
};

using block_manager_pointer = proto::block_manager_actor::stateful_pointer<block_manager_state>;

// Fan-in of one reply per shard into one response promise; the first error wins.
template <class T>
struct gather {
  explicit gather(size_t n) : results(n), remaining(n) {}
  std::vector<T> results;
  size_t remaining;
  bool failed = false;
};

void init_caches(block_manager_pointer self, proto::kv_cache_config config,
                 caf::typed_response_promise<proto::kv_cache_config> rp) {
  auto& st = self->state;
  auto g = std::make_shared<gather<int>>(st.args.shards.size());
  for (const auto& shard : st.args.shards)
    self->request(shard, caf::infinite, proto::init_cache_atom::value, config)
        .then(
            [self, g, config, rp](caf::ok_atom) mutable {
              if (g->failed || --g->remaining > 0)
                return;
              self->state.config = config;
              rp.deliver(config);
            },
            [g, rp](caf::error& err) mutable {
              if (!std::exchange(g->failed, true))
                rp.deliver(std::move(err));
            });
}

proto::block_manager_actor::behavior_type block_manager_behavior(block_manager_pointer self, block_manager_args args) {
  self->state.args = std::move(args);
  return {
      [self](proto::configure_atom) -> caf::result<proto::kv_cache_config> {
        auto& st = self->state;
        if (st.args.shards.empty())
          return proto::make_error(errc::internal, "no shards to size the KV cache for");
        auto rp = self->make_response_promise<proto::kv_cache_config>();
        auto g = std::make_shared<gather<proto::shard_profile>>(st.args.shards.size());
        for (size_t i = 0; i < st.args.shards.size(); ++i)
          self->request(st.args.shards[i], caf::infinite, proto::profile_atom::value, st.args.block_size,
                        st.args.kv_cache_memory, st.args.profile_tokens)
              .then(
                  [self, g, i, rp](proto::shard_profile& profile) mutable {
                    g->results[i] = profile;
                    if (g->failed || --g->remaining > 0)
                      return;
                    const auto& a = self->state.args;
                    cache_plan plan = plan_cache(g->results, a.block_size, a.kv_cache_memory, a.max_model_len,
                                                 a.gpu_memory_utilization);
                    if (!plan.error.empty()) {
                      rp.deliver(proto::make_error(errc::invalid_config, plan.error));
                      return;
                    }
                    const auto& c = plan.config;
                    log::info("block_manager", "# {} blocks: {}", a.device, c.n_blocks);
                    log::info("block_manager",
                              "{} KV cache size: {} tokens ({} blocks of {}, {} bytes per block on "
                              "the largest shard)",
                              a.device, c.token_capacity(), c.n_blocks, c.block_size, c.max_bytes_per_block);
                    if (const int32_t shares = a.dcp_size * a.pcp_size; shares > 1)
                      log::info("block_manager",
                                "{}: each rank of a group keeps {} of every block's {} positions, 1/{} of each "
                                "sequence's KV cache",
                                a.pcp_size == 1   ? fmt::format("Decode context parallel size {}", a.dcp_size)
                                : a.dcp_size == 1 ? fmt::format("Prefill context parallel size {}", a.pcp_size)
                                                  : fmt::format("Context parallel sizes: prefill {} x decode {}",
                                                                a.pcp_size, a.dcp_size),
                                c.block_size / shares, c.block_size, shares);
                    log::info("block_manager", "Maximum concurrency for {} tokens per request: {:.2f}x",
                              a.max_model_len, static_cast<double>(c.token_capacity()) / a.max_model_len);
                    init_caches(self, c, rp);
                  },
                  [g, rp](caf::error& err) mutable {
                    if (!std::exchange(g->failed, true))
                      rp.deliver(std::move(err));
                  });
        return rp;
      },
      [self](caf::get_atom) -> caf::result<proto::kv_cache_config> {
        if (!self->state.config)
          return proto::make_error(errc::internal, "the KV cache is not configured yet");
        return *self->state.config;
      },
  };
}

}  // namespace

proto::block_manager_actor spawn_block_manager(caf::actor_system& sys, block_manager_args args) {
  return sys.spawn(block_manager_behavior, std::move(args));
}

}  // namespace actorllm::actors
