// The `uni` executor: builds one replica's whole actor graph in this process (every shard a detached actor with
// its own threads, TP ranks of a stage sharing memory) and tears it down again.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actorllm/proto/interfaces.hpp"
#include "actorllm/proto/worker.hpp"
#include "actors/parallel_layout.hpp"
#include "engine/scheduler_config.hpp"
#include "kernels/device.hpp"
#include "model/model_config.hpp"
#include "model/model_source.hpp"
#include "text/tokenizer.hpp"
#include "util/child_process.hpp"

#include <caf/fwd.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::actors {

/// The actors of one replica and the facts it was built with.
struct replica {
  proto::engine_actor engine;
  proto::scheduler_actor scheduler;
  proto::block_manager_actor block_manager;
  std::vector<proto::shard_actor> shards;  ///< stage-major: stage 0 ranks 0..tp-1, then stage 1, ...
  model::model_config model;
  std::vector<stage_range> stages;
  proto::kv_cache_config cache;
  int32_t max_model_len = 0;
  std::optional<text::tokenizer> tokenizer;
  /// Executors with worker processes: the processes (killed and reaped when the replica stops) and the registry
  /// they joined; empty for `uni`.
  std::vector<std::shared_ptr<util::child_process>> processes;
  std::vector<proto::worker_actor> workers;
  proto::worker_registry_actor registry;
  std::string executor = "uni";  ///< the executor that built it
  /// Stops the worker processes wherever they run (mp: this node's children; cluster: through the agents).
  std::function<void()> release_workers;
};

/// What plan_replica settles before any shard exists: the replica's model facts, the scheduler's limits, how
/// shards load, the device they run on, and their thread budget.
struct replica_plan {
  replica r;  ///< model, stages, max_model_len, tokenizer filled; no actors yet
  engine::scheduler_config scheduler;
  model::load_options load;
  device_kind device = device_kind::cpu;  ///< engine_config::device, resolved
  int32_t threads_per_shard = 1;
};

/// Checks `config` against the model's config.json (TP split of the heads, pipeline layout, scheduler limits) and
/// loads the tokenizer, before any weight is read. Throws actorllm::error (invalid_config, load_failed).
replica_plan plan_replica(const engine_config& config);

/// With plan.r.shards spawned (stage-major, by any executor): loads them, sizes the KV cache through the block
/// manager, spawns the scheduler and the engine. On failure stops every actor of plan.r and rethrows.
void finish_replica(caf::actor_system& sys, const engine_config& config, replica_plan& plan);

/// "3,2": the layers of each stage, for logs.
std::string describe_stages(const std::vector<stage_range>& stages);

/// Checks `config` against the model's config.json (TP split of the heads, pipeline layout, scheduler limits)
/// before any weight is read, then spawns the shards, loads them in parallel, sizes the KV cache through the block
/// manager, and spawns the scheduler and the engine. Throws actorllm::error (invalid_config, load_failed) naming
/// the problem; actors spawned before a failure are stopped again.
replica build_uni_replica(caf::actor_system& sys, const engine_config& config);

/// Aborts what still runs, waits for the pipeline to drain, and stops every actor of `r` (the actor system's
/// destructor then joins their threads).
void stop_replica(caf::actor_system& sys, replica& r);

}  // namespace actorllm::actors
