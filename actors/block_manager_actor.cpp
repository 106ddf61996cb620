// The block manager actor.
#include "actors/block_manager_actor.hpp"

#include "actorllm/proto/error.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <memory>

namespace actorllm::actors {

cache_plan plan_cache(const std::vector<proto::shard_profile>& profiles, int32_t block_size, uint64_t kv_cache_memory,
                      int32_t max_model_len) {
  cache_plan plan;
  if (profiles.empty()) {
    plan.error = "no shards to size the KV cache for";
    return plan;
  }
  int64_t n_blocks = std::numeric_limits<int32_t>::max();
  uint64_t max_bytes = 0;
  for (const auto& p : profiles) {
    if (p.n_blocks_fit < 1) {
      plan.error = fmt::format(
          "kv_cache_memory of {} bytes holds no KV-cache block on stage {} rank {}, where a block "
          "of {} tokens takes {} bytes",
          kv_cache_memory, p.stage, p.tp_rank, block_size, p.bytes_per_block);
      return plan;
    }
    n_blocks = std::min(n_blocks, p.n_blocks_fit);
    max_bytes = std::max(max_bytes, p.bytes_per_block);
  }
  plan.config.n_blocks = static_cast<int32_t>(n_blocks);
  plan.config.block_size = block_size;
  plan.config.max_bytes_per_block = max_bytes;
  if (plan.config.token_capacity() < max_model_len)
    plan.error = fmt::format(
        "the model's max seq len ({}) is larger than the maximum number of tokens that can be "
        "stored in the KV cache ({}: {} blocks of {}); increase kv_cache_memory (now {} bytes per "
        "shard) or decrease max_model_len",
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
                        st.args.kv_cache_memory)
              .then(
                  [self, g, i, rp](proto::shard_profile& profile) mutable {
                    g->results[i] = profile;
                    if (g->failed || --g->remaining > 0)
                      return;
                    const auto& a = self->state.args;
                    cache_plan plan = plan_cache(g->results, a.block_size, a.kv_cache_memory, a.max_model_len);
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
