// What the mp and cluster executors share: a replica whose shards live in `actorllm worker` processes. The engine
// publishes a worker registry, has a launcher start one worker per shard (locally, or through node agents), waits
// for every worker to register, has each host its shard, and then finishes the replica as in-process.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actorllm/proto/worker.hpp"
#include "actors/executors/replica.hpp"

#include <caf/fwd.hpp>

#include <functional>
#include <optional>
#include <string>

namespace actorllm::actors {

/// Starts the worker processes of one replica generation.
class worker_launcher {
 public:
  virtual ~worker_launcher() = default;
  /// "mp executor" / "cluster executor", for logs.
  virtual std::string name() const = 0;
  /// Starts worker `index` so that it registers at host:port with `token`. Throws std::exception naming the
  /// problem (the node, the model, the process).
  virtual void start(int32_t index, const std::string& registry_host, uint16_t registry_port,
                     const std::string& token) = 0;
  /// Called while waiting for registrations: a message when a started worker is known to have died.
  virtual std::optional<std::string> dead_worker() = 0;
  /// Kernel threads for the shard of worker `index`.
  virtual int32_t threads_for(int32_t /*index*/, int32_t planned) const { return planned; }
  /// The node-wide rank of the replica's first shard for GPU choice (replica_share::device_offset); cluster: 0,
  /// as each worker sees only the device its agent gave it.
  virtual int32_t device_offset(int32_t planned) const { return planned; }
  /// Stops every worker this launcher started (the replica stops, or building it failed).
  virtual void stop_all() = 0;
  /// The processes it started on this node, for the replica watch (cluster: none, the agents watch theirs).
  virtual std::vector<std::shared_ptr<util::child_process>> local_processes() const { return {}; }
};

/// Workers that registered with a fresh registry (one generation).
struct worker_set {
  proto::worker_registry_actor registry;
  uint16_t port = 0;
  std::string token;
  std::vector<proto::worker_actor> workers;  ///< by index
};

/// Publishes a registry on `registry_host`, starts `world` workers with `launcher` and waits until all registered.
/// Throws actorllm::error (load_failed) naming the worker that failed or the number that registered in time;
/// the workers started are stopped again then.
worker_set launch_workers(caf::actor_system& sys, worker_launcher& launcher, int32_t world,
                          const std::string& registry_host);

/// Builds the replica with `launcher` (kept alive by the replica, which stops its workers when it stops).
/// `registry_host` is the address the engine's registry binds and workers connect to. Throws actorllm::error
/// naming the worker or shard that failed; every worker started is stopped again.
replica build_worker_replica(caf::actor_system& sys, const engine_config& config, replica_plan plan,
                             std::shared_ptr<worker_launcher> launcher, const std::string& registry_host);

}  // namespace actorllm::actors
