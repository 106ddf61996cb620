// Liveness of a replica whose shards live in worker processes: the watch monitors every worker and shard (CAF
// down messages arrive when a process dies or its connection drops; BASP heartbeats bound how long a silent peer
// takes), probes every worker with an application-level ping, and checks the processes it started. On the first
// failure it fails the scheduler at once (every in-flight request ends with the reason, /health turns non-200) and
// reports the failure once to the owner, which restarts the replica.
#pragma once

#include "actors/executors/replica.hpp"

#include <caf/fwd.hpp>

#include <chrono>
#include <functional>
#include <string>

namespace actorllm::actors {

struct replica_watch_args {
  std::vector<proto::shard_actor> shards;
  std::vector<proto::worker_actor> workers;
  std::vector<std::shared_ptr<util::child_process>> processes;  ///< may be empty (cluster: agents watch those)
  proto::scheduler_actor scheduler;
  /// Told first, so that its requests end with the failure before the owner's restart shuts it down (which would
  /// end them as aborted instead).
  proto::engine_actor engine;
  int32_t tp_size = 1;
  std::chrono::milliseconds probe_interval{500};
  std::chrono::milliseconds probe_timeout{2000};  ///< a worker that answers no ping for this long is dead
  /// Called once, from the watch's thread, with the reason. Must not block.
  std::function<void(std::string)> on_failure;
};

/// Spawns the watch (event-based). Stop it with an exit message before stopping the replica on purpose.
caf::actor spawn_replica_watch(caf::actor_system& sys, replica_watch_args args);

/// A watch over `r` (its shards, workers, processes and scheduler).
replica_watch_args watch_args_for(const replica& r, int32_t tp_size, std::function<void(std::string)> on_failure);

}  // namespace actorllm::actors
