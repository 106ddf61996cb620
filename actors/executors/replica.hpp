// A replica: one copy of the model's actor graph (engine, scheduler, shards) and the facts it was built with; how
// its share of the node is computed, how it is planned before any shard exists, how every executor describes its
// shards (make_shard_assignment), how a replica with spawned shards is finished (loaded, its KV cache sized and
// allocated, scheduler and engine spawned) and stopped. Executors (uni, mp, cluster) differ only in where the shards
// run.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actorllm/proto/interfaces.hpp"
#include "actorllm/proto/worker.hpp"
#include "actors/executors/parallel_layout.hpp"
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

namespace actorllm::comm {
class shared_memory_group;
}

namespace actorllm::actors {

/// Which of an engine's data-parallel replicas is being built: its rank among them and how many there are (for its
/// share of the devices and threads).
struct replica_slot {
  replica_slot() = default;
  replica_slot(int32_t rank, int32_t size, std::shared_ptr<comm::shared_memory_group> group = nullptr)
      : dp_rank(rank), dp_size(size), expert_group(std::move(group)) {}

  int32_t dp_rank = 0;
  int32_t dp_size = 1;
  /// Lockstep expert parallelism (actors/executors/lockstep_replicas.hpp) in process (uni executor): the EP group
  /// over every replica's TP ranks, which this replica's shards join at ranks dp_rank × tp + tp rank; its scheduler
  /// keeps step with the others'. Null: the replica steps alone (its EP group, if any, is its TP group), or its
  /// shards are in worker processes (expert_store).
  std::shared_ptr<comm::shared_memory_group> expert_group;
  /// Lockstep expert parallelism over worker processes (mp and cluster executors): the store in which the shards of
  /// every replica of the set meet to build their EP group, and the keys of this generation of the set in it.
  proto::rendezvous_store_actor expert_store;
  std::string expert_prefix;

  /// Whether the replica keeps step with the other replicas of a lockstep set.
  bool in_lockstep() const { return expert_group != nullptr || static_cast<bool>(expert_store); }
};

/// A replica's share of this node when several replicas of one engine run on it: its own devices (the shards of
/// local replica i take the node's devices from i × tp × pp on) and its part of the kernel threads.
struct replica_share {
  int32_t local_replicas = 1;  ///< replicas of the engine on this node's devices and cores (--data-parallel-size-local)
  int32_t local_index = 0;     ///< this replica's place among them
  int32_t device_offset = 0;   ///< the node-wide rank of its first shard: local_index × tp × pp
  int32_t threads = 1;         ///< kernel threads of the whole replica (engine_config::threads, or every core, split)
};

/// The share of replica `slot` for `config` on a node with `hardware_threads` cores: local_replicas is
/// data_parallel_size_local when given (at most slot.dp_size), else slot.dp_size; local_index is dp_rank modulo
/// local_replicas; threads is (config.threads, or hardware_threads when 0) / local_replicas, at least 1.
replica_share share_of(const engine_config& config, const replica_slot& slot, int32_t hardware_threads);

/// "replica 1: " when the engine has more than one replica, else "" (log prefixes).
std::string replica_prefix(int32_t dp_rank, int32_t dp_size);

/// The actors of one replica and the facts it was built with.
struct replica {
  int32_t dp_rank = 0;  ///< its data-parallel rank (replica_slot::dp_rank), for logs and metrics
  int32_t dp_size = 1;  ///< how many replicas the engine has
  proto::engine_actor engine;
  proto::scheduler_actor scheduler;
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
  device_kind device = device_kind::cpu;       ///< engine_config::device, resolved
  replica_share share;                         ///< this replica's devices and threads on this node
  int32_t threads_per_shard = 1;               ///< share.threads / (tp × pp), at least 1
  bool lockstep = false;                       ///< its scheduler keeps step with its peers' (replica_slot::in_lockstep)
  proto::rendezvous_store_actor expert_store;  ///< replica_slot::expert_store
  std::string expert_prefix;                   ///< replica_slot::expert_prefix
};

/// Checks `config` against the model's config.json (TP split of the heads, pipeline layout, scheduler limits) and
/// loads the tokenizer, before any weight is read; sizes the shards' threads from the share of replica `slot`.
/// Throws actorllm::error (invalid_config, load_failed).
replica_plan plan_replica(const engine_config& config, const replica_slot& slot = {});

/// With plan.r.shards spawned (stage-major, by any executor): loads them, sizes the KV cache from their profiles
/// (cache_plan.hpp) and has them allocate it, spawns the scheduler and the engine. On failure stops every actor of
/// plan.r and rethrows.
void finish_replica(caf::actor_system& sys, const engine_config& config, replica_plan& plan);

/// "3,2": the layers of each stage, for logs.
std::string describe_stages(const std::vector<stage_range>& stages);

/// How stop_replica ends what still runs.
enum class replica_stop {
  drain,    ///< aborts what still runs and waits (bounded) for the pipeline to drain
  at_once,  ///< no drain: a failed replica whose step may never finish (its requests were moved already)
};

/// Stops `r`: drains it (or not: `how`), then stops every actor of `r` (the actor system's destructor then joins their
/// threads) and its worker processes.
void stop_replica(caf::actor_system& sys, replica& r, replica_stop how = replica_stop::drain);

/// The assignment of shard `index` (in its stage, copy-major: pcp copies of the TP group) of stage `stage` of
/// `plan`'s replica: the one description of a shard every executor starts from (the uni executor spawns it in this
/// process, the others send it to a worker). The caller fills in what depends on where the shard runs: its successor
/// (`next`), and for worker processes their thread count, device offset and rendezvous.
proto::shard_assignment make_shard_assignment(const engine_config& config, const replica_plan& plan, int32_t stage,
                                              int32_t index);

}  // namespace actorllm::actors
