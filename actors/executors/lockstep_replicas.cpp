// Lockstep replicas for expert parallelism over data parallelism: see lockstep_replicas.hpp.
#include "actors/executors/lockstep_replicas.hpp"
#include "actors/executors/uni_executor.hpp"

#include "actorllm/error.hpp"
#include "actorllm/proto/error.hpp"
#include "model/model_error.hpp"
#include "util/log.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

namespace actorllm::actors {

namespace {

[[noreturn]] void refuse(const engine_config& config, const std::string& why) {
  throw actorllm::error{
      errc::invalid_config,
      fmt::format("enable_expert_parallel (--enable-expert-parallel) with data_parallel_size {}: the expert-parallel "
                  "group spans every replica's tensor-parallel ranks ({} x {}), so the replicas step together in one "
                  "process; {}",
                  config.data_parallel_size, config.data_parallel_size, config.tensor_parallel_size, why)};
}

}  // namespace

bool steps_in_lockstep(const engine_config& config, const model::model_config& model) {
  const int32_t dp = std::max(config.data_parallel_size, 1);
  if (!config.enable_expert_parallel || model.n_expert <= 0 || dp <= 1)
    return false;
  if (config.data_parallel_rank >= 0)
    refuse(config, fmt::format("data_parallel_rank {} runs one replica per engine: leave it out and serve all {} "
                               "replicas from one",
                               config.data_parallel_rank, dp));
  if (config.data_parallel_size_local > 0 && config.data_parallel_size_local < dp)
    refuse(config, fmt::format("data_parallel_size_local {} would put replicas on other nodes",
                               config.data_parallel_size_local));
  if (config.pipeline_parallel_size > 1)
    refuse(config, fmt::format("that runs with one pipeline stage, not pipeline_parallel_size {}",
                               config.pipeline_parallel_size));
  if (config.distributed_executor_backend != "uni")
    refuse(config, fmt::format("that needs the uni executor, not distributed_executor_backend '{}'",
                               config.distributed_executor_backend));
  const int64_t ep = int64_t{dp} * config.tensor_parallel_size;
  if (ep > model.n_expert)
    refuse(config, fmt::format("{} expert-parallel ranks are more than the model's {} experts", ep, model.n_expert));
  return true;
}

namespace {

std::optional<model::model_config> read_model_config(const std::string& dir) {
  try {
    return model::load_model_config(dir);
  } catch (const model::model_error&) {
    return std::nullopt;
  }
}

}  // namespace

bool steps_in_lockstep(const engine_config& config) {
  if (!config.enable_expert_parallel || config.data_parallel_size <= 1)
    return false;
  const auto model = read_model_config(config.model);
  return model && steps_in_lockstep(config, *model);
}

bool names_moe_model(const std::string& dir) {
  const auto model = read_model_config(dir);
  return model && model->n_expert > 0;
}

lockstep_set build_lockstep_replicas(caf::actor_system& sys, const engine_config& config, int32_t dp_size) {
  lockstep_set set;
  const int32_t ep = dp_size * config.tensor_parallel_size;
  set.expert_group = std::make_shared<comm::shared_memory_group>(ep, "the expert-parallel group");
  set.replicas.resize(static_cast<size_t>(dp_size));
  log::info("replicas", "{} replicas step in lockstep over one expert-parallel group of {} ranks", dp_size, ep);

  std::mutex mutex;
  std::exception_ptr first_failure;  // the first in time: the others may only be its echo through the group
  std::vector<std::thread> builders;
  for (int32_t i = 0; i < dp_size; ++i)
    builders.emplace_back([&, i] {
      replica_slot slot;
      slot.dp_rank = i;
      slot.dp_size = dp_size;
      slot.expert_group = set.expert_group;
      try {
        set.replicas[static_cast<size_t>(i)] = build_uni_replica(sys, config, slot);
      } catch (const std::exception& e) {
        std::lock_guard lock{mutex};
        if (!first_failure) {
          first_failure = std::current_exception();
          set.expert_group->abort(fmt::format("replica {} could not be built: {}", i, e.what()));
        }
      }
    });
  for (auto& t : builders)
    t.join();

  if (!first_failure) {
    // Every scheduler tells every other one of each step it dispatches.
    caf::scoped_actor self{sys};
    try {
      for (const auto& r : set.replicas)
        for (const auto& peer : set.replicas)
          if (peer.scheduler != r.scheduler)
            self->request(r.scheduler, std::chrono::seconds{10}, proto::connect_atom::value,
                          caf::actor_cast<proto::round_sink>(peer.scheduler))
                .receive([](caf::ok_atom) {}, [](caf::error& err) { throw proto::to_exception(err); });
    } catch (...) {
      first_failure = std::current_exception();
    }
  }
  if (first_failure) {
    stop_lockstep_replicas(sys, set.replicas, set.expert_group, "the replicas could not all be built");
    std::rethrow_exception(first_failure);
  }
  return set;
}

void stop_lockstep_replicas(caf::actor_system& sys, std::vector<replica>& replicas,
                            const std::shared_ptr<comm::shared_memory_group>& expert_group, const std::string& why) {
  {
    // Drain all at once: one replica's drain may wait for a step that needs every other replica's experts.
    caf::scoped_actor self{sys};
    std::vector<std::pair<int32_t, decltype(self->request(replicas.front().engine, std::chrono::seconds{30},
                                                          proto::shutdown_atom::value))>>
        pending;
    for (const auto& r : replicas)
      if (r.engine)
        pending.emplace_back(r.dp_rank, self->request(r.engine, std::chrono::seconds{30}, proto::shutdown_atom::value));
    for (auto& [rank, p] : pending)
      p.receive([](caf::ok_atom) {},
                [&, rank = rank](caf::error& err) {
                  log::warning("replicas", "replica {}: shutdown did not drain cleanly: {}", rank,
                               proto::message_of(err));
                });
  }
  // Drained, no step of any replica is in flight, so no shard is in (or will enter) a collective of the group unless
  // a replica failed: then the abort wakes its peers' shards still waiting for it, before their actors are stopped.
  if (expert_group)
    expert_group->abort(why);
  for (auto& r : replicas)
    if (r.engine || !r.shards.empty())
      stop_replica(sys, r);  // drained: its own drain returns at once
  replicas.clear();
}

}  // namespace actorllm::actors
