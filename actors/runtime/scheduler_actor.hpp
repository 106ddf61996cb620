// The scheduler actor: a thin shell around engine::scheduler_core. It turns each plan into one message for every
// shard of the replica (block tables as a diff against what the shards hold: engine::block_table_mirror), keeps up
// to pp_size of them in flight (the core enforces the count), folds sampled tokens back in, and reports each step's
// news to the engine in one message. A step that gets no result within the step timeout fails
// the replica like a dead shard does, so no request waits forever on a message that was lost. With lockstep expert
// parallelism it also keeps its step count equal to its peer replicas' (engine::lockstep_rounds), with idle plans.
#pragma once

#include "actorllm/proto/interfaces.hpp"
#include "engine/scheduler_config.hpp"

#include <caf/fwd.hpp>

#include <chrono>
#include <vector>

namespace actorllm::actors {

/// Everything the scheduler is built from.
struct scheduler_args {
  engine::scheduler_config config;        ///< n_blocks from the block manager, pp_size = pipeline stages
  std::vector<proto::shard_link> shards;  ///< every shard of the replica (all stages, all tp ranks)
  /// A step with no result after this long fails the replica (a shard or a link that stopped answering without
  /// going down); zero: no limit.
  std::chrono::milliseconds step_timeout{0};
  /// Lockstep expert parallelism (actors/executors/lockstep_replicas.hpp): every step this scheduler dispatches is
  /// announced to its peers (connect_atom, round_sink), and it dispatches idle plans to keep up with theirs.
  bool lockstep = false;
};

/// Spawns the scheduler (an event-based actor: it never blocks). Its config must be valid (see
/// scheduler_config::validate); the caller checks first.
proto::scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_args args);

}  // namespace actorllm::actors
