// The restart policy of an engine's replicas, as a plain class: which replicas serve, which are being rebuilt
// after a failure, how long to wait before the next try (1, 2, 4, 8 s), and when to give up on one
// (max_worker_restarts, per replica). The engine stays up while any replica serves or may still come back.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::detail {

class replica_supervisor {
 public:
  enum class state : uint8_t {
    serving,     ///< takes requests
    restarting,  ///< failed; being rebuilt (or waiting for the next try)
    given_up,    ///< failed and will not be rebuilt
  };

  struct policy {
    bool restart = true;       ///< engine_config::restart_workers
    int32_t max_restarts = 3;  ///< engine_config::max_worker_restarts, per replica
  };

  /// `ranks`: each replica's data-parallel rank, which the decisions' messages name (empty: its index).
  replica_supervisor(int32_t n_replicas, policy p, std::vector<int32_t> ranks = {});

  /// What to do after a failure or a failed restart.
  struct decision {
    bool restart = false;               ///< try to rebuild the replica (after `wait`)
    std::chrono::milliseconds wait{0};  ///< before that try
    std::string why;                    ///< for the log: what happens and why
  };

  /// A serving replica failed. A second report of the same failure (the replica is already restarting or given up)
  /// returns nullopt: nothing more to do.
  std::optional<decision> on_failure(int32_t replica, const std::string& reason);
  /// Building the replica again failed: try again after a backoff, or give up once the restarts are spent.
  decision on_restart_failed(int32_t replica, const std::string& reason);
  /// The replica was rebuilt and serves again.
  void on_restarted(int32_t replica);

  state state_of(int32_t replica) const { return replicas_.at(static_cast<size_t>(replica)).st; }
  bool serving(int32_t replica) const { return state_of(replica) == state::serving; }
  /// Why the replica is not serving (empty while it serves).
  const std::string& failure(int32_t replica) const { return replicas_.at(static_cast<size_t>(replica)).failure; }
  /// Restarts begun for the replica since start.
  int32_t restarts(int32_t replica) const { return replicas_.at(static_cast<size_t>(replica)).restarts; }
  /// Whether some replica serves now.
  bool any_serving() const;
  /// Whether every replica was given up on: the engine cannot serve any more.
  bool all_given_up() const;
  int32_t size() const { return static_cast<int32_t>(replicas_.size()); }

 private:
  struct replica_state {
    state st = state::serving;
    int32_t restarts = 0;
    std::string failure;
  };
  decision next_try(int32_t replica);
  /// The replica's data-parallel rank (its index when no ranks were given).
  int32_t rank_of(int32_t replica) const;

  policy policy_;
  std::vector<int32_t> ranks_;
  std::vector<replica_state> replicas_;
};

}  // namespace actorllm::detail
