// Lockstep replicas for expert parallelism over data parallelism: see lockstep_replicas.hpp.
#include "actors/executors/lockstep_replicas.hpp"
#include "actors/cluster/worker_registry.hpp"
#include "actors/executors/executor.hpp"

#include "actorllm/error.hpp"
#include "actorllm/proto/error.hpp"
#include "model/model_error.hpp"
#include "util/log.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

namespace actorllm::actors {

namespace {

[[noreturn]] void refuse(const engine_config& config, const std::string& why) {
  throw actorllm::error{
      errc::invalid_config,
      fmt::format("enable_expert_parallel (--enable-expert-parallel) with data_parallel_size {}: the expert-parallel "
                  "group spans every replica's tensor-parallel ranks ({} x {}), so the replicas step together; {}",
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
  const std::string& executor = config.distributed_executor_backend;
  if (executor != "uni" && executor != "mp" && executor != "cluster")
    refuse(config, fmt::format("that runs on the uni, mp or cluster executor, not distributed_executor_backend '{}'",
                               executor));
  if (config.data_parallel_size_local > 0 && config.data_parallel_size_local < dp && executor == "uni")
    refuse(config, fmt::format("data_parallel_size_local {} puts replicas on other nodes, which the uni executor's "
                               "in-process group cannot reach: run the local replicas in worker processes "
                               "(distributed_executor_backend mp)",
                               config.data_parallel_size_local));
  if (config.pipeline_parallel_size > 1)
    refuse(config, fmt::format("that runs with one pipeline stage, not pipeline_parallel_size {}",
                               config.pipeline_parallel_size));
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

namespace {

std::string random_key() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

}  // namespace

lockstep_set build_lockstep_replicas(caf::actor_system& sys, const engine_config& config, int32_t dp_size) {
  lockstep_set set;
  const int32_t ep = dp_size * config.tensor_parallel_size;
  const bool in_process = config.distributed_executor_backend == "uni";
  std::string prefix;
  if (in_process) {
    set.expert_group = std::make_shared<comm::shared_memory_group>(ep, "the expert-parallel group");
  } else {
    // A store of its own (no worker registers there): every replica's workers reach it, whichever registry admitted
    // them. Each generation of the set has its own, so a worker of a failed one can never meet the next.
    const std::string key = random_key();
    set.expert_store = spawn_worker_registry(sys, {key, 0, caf::actor{}});
    prefix = "ep-" + key;
  }
  set.replicas.resize(static_cast<size_t>(dp_size));
  log::info("replicas", "{} replicas step in lockstep over one expert-parallel group of {} ranks ({})", dp_size, ep,
            in_process ? "in this process, over shared memory"
                       : fmt::format("in worker processes of the {} executor", config.distributed_executor_backend));

  std::mutex mutex;
  std::exception_ptr first_failure;  // the first in time: the others may only be its echo through the group
  std::vector<std::thread> builders;
  // Built at once: their shards meet in the EP group while they load and profile.
  for (int32_t i = 0; i < dp_size; ++i)
    builders.emplace_back([&, i] {
      replica_slot slot;
      slot.dp_rank = i;
      slot.dp_size = dp_size;
      slot.expert_group = set.expert_group;
      slot.expert_store = set.expert_store;
      slot.expert_prefix = prefix;
      try {
        set.replicas[static_cast<size_t>(i)] = build_replica(sys, config, slot);
      } catch (const std::exception& e) {
        std::lock_guard lock{mutex};
        if (!first_failure) {
          first_failure = std::current_exception();
          const std::string why = fmt::format("replica {} could not be built: {}", i, e.what());
          // The others' shards may wait for this one's in the group (uni) or for its keys in the store (workers).
          if (set.expert_group)
            set.expert_group->abort(why);
          if (set.expert_store)
            caf::anon_send(set.expert_store, proto::store_close_atom::value, why);
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
    stop_lockstep_set(sys, set, "the replicas could not all be built", /*failed=*/true);
    std::rethrow_exception(first_failure);
  }
  return set;
}

void stop_lockstep_set(caf::actor_system& sys, lockstep_set& set, const std::string& why, bool failed) {
  auto& replicas = set.replicas;
  if (!failed && !replicas.empty()) {
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
  // Drained, no step of any replica is in flight, so no shard is in (or will enter) a collective of the group. After
  // a failure a step may wait there for a rank that is gone: the abort wakes the shards of an in-process group;
  // workers are stopped with their processes, before anything waits for them.
  if (set.expert_group)
    set.expert_group->abort(why);
  if (failed)
    for (auto& r : replicas)
      if (r.release_workers) {
        r.release_workers();
        r.release_workers = nullptr;
      }
  for (auto& r : replicas)
    if (r.engine || !r.shards.empty())
      stop_replica(sys, r, replica_stop::at_once);  // drained, or failed: nothing left to wait for
  replicas.clear();
  if (set.expert_store)
    caf::anon_send_exit(set.expert_store, caf::exit_reason::user_shutdown);
  set.expert_store = nullptr;
  set.expert_group = nullptr;
}

}  // namespace actorllm::actors
