// The data-parallel replicas behind one LLM: data_parallel_size copies of the tp × pp actor graph, a router that
// sends each request to one of them, and the failover that moves a dead replica's requests to the others while the
// supervisor thread rebuilds it (the whole set, when the replicas step in lockstep for expert parallelism). The
// policy lives in plain classes (request_book, router, replica_supervisor); this class holds the actors and the
// threads and applies what those decide.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actorllm/engine_stats.hpp"
#include "actorllm/llm.hpp"
#include "actors/executors/replica.hpp"
#include "api/delivery.hpp"
#include "api/lora_check.hpp"
#include "api/replica_supervisor.hpp"
#include "api/request_book.hpp"
#include "api/router.hpp"
#include "comm/shared_memory_collective.hpp"

#include <caf/fwd.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace actorllm::detail {

class replica_set {
 public:
  /// Builds every replica of `config` (data_parallel_size of them; one when data_parallel_rank picks one) in `sys`.
  /// Throws actorllm::error when one cannot be built (the others are stopped again).
  replica_set(caf::actor_system& sys, const engine_config& config);
  /// Stops every replica; requests still live end with errc::shut_down.
  ~replica_set();
  replica_set(const replica_set&) = delete;
  replica_set& operator=(const replica_set&) = delete;

  /// Routes a request to a replica and returns its id; its news goes to `ch`.
  uint64_t submit(const prompt& p, const sampling_params& params, int32_t priority, bool stream,
                  std::shared_ptr<channel> ch);
  /// Aborts a request and waits until its blocks are free; false when it is not live.
  bool abort(uint64_t id);
  /// Aborts without waiting.
  void abort_async(uint64_t id);
  /// Stats summed over the serving replicas, with one entry per replica; waits for stats_async's answer.
  engine_stats stats();
  /// Asks the serving replicas' engines for their stats (api/engine_calls.hpp) and returns at once; `done` gets the
  /// sum on an actor thread.
  void stats_async(std::function<void(engine_stats)> done);
  /// Resets every serving replica's prefix cache; returns the blocks forgotten in all. Throws the first failure.
  int32_t reset_prefix_cache();
  /// The same without waiting: `done` gets the blocks forgotten and the first failure on an actor thread.
  void reset_prefix_cache_async(std::function<void(int32_t, std::optional<error>)> done);
  /// The adapters requests may name (LLM::add_lora / remove_lora).
  lora_check& lora_checks() { return *lora_check_; }

  /// The first replica as built (model facts, cache size, stages): what model_info reports.
  const actors::replica& first() const { return first_; }
  /// Called once, from the supervisor thread, when no replica can serve any more.
  void on_unrecoverable_failure(std::function<void(const std::string&)> handler);

 private:
  struct failure_job {
    int32_t replica = 0;
    replica_supervisor::decision decision;
  };

  /// A replica failed (its watch, or a request it failed, said so). Under mutex_: marks it, moves its requests.
  void report_failure_locked(int32_t replica, const std::string& reason, std::vector<uint64_t>& lost);
  /// Sends request `id` (between replicas) to a serving replica, or fails it when none serves. Under mutex_.
  void place_locked(uint64_t id, const std::string& reason, request_book::deliveries& out);
  /// Marks an abort in the book; the engine running the request's current attempt and that attempt's id (a null
  /// engine: not live, or between replicas, where it ends when it would have moved).
  std::pair<proto::engine_actor, uint64_t> mark_abort(uint64_t id);
  /// The delivery thread's handler for every engine batch.
  void on_batch(proto::output_batch& batch);
  void watch(int32_t replica);
  void supervise();
  /// A replica (or a lockstep set) will not be rebuilt: logs why, and once no replica can come back, tells the
  /// handler of on_unrecoverable_failure.
  void give_up(const replica_supervisor::decision& decision);
  /// Lockstep replicas (expert parallelism over data parallelism): the supervisor's job for a failure, which stops
  /// the whole set and rebuilds it. Returns false when the engine is stopping.
  bool restart_lockstep_set(failure_job job);
  /// The replica `index` is, in config terms (its slot), and its build.
  actors::replica build(int32_t index);
  std::vector<bool> serving_locked() const;
  /// The message a request gets when no replica serves.
  std::string unavailable_locked() const;

  caf::actor_system& sys_;
  engine_config config_;
  int32_t dp_size_ = 1;         ///< replicas of the engine (data_parallel_size)
  std::vector<int32_t> ranks_;  ///< the data-parallel rank of each replica held here
  /// The replicas step in lockstep over one expert-parallel group (actors/executors/lockstep_replicas.hpp): they are
  /// built, fail and restart together.
  bool lockstep_ = false;
  std::shared_ptr<comm::shared_memory_group> expert_group_;  ///< the lockstep set's EP group, uni (under mutex_)
  proto::worker_registry_actor expert_store_;  ///< the lockstep set's EP store, mp and cluster (under mutex_)
  /// A lockstep set failed and its restart is under way: the requests it ran wait here (ids in the book) instead of
  /// failing, and go to the set again once it serves (under mutex_).
  bool set_restarting_ = false;
  std::vector<uint64_t> awaiting_set_;
  actors::replica first_;
  proto::output_sink delivery_;
  std::unique_ptr<lora_check> lora_check_;  ///< the adapters requests named, checked against the model

  mutable std::mutex mutex_;
  std::vector<actors::replica> replicas_;
  std::vector<caf::actor> watches_;
  std::vector<uint64_t> watch_generations_;  ///< per replica: which watch may report (a stopped one may not)
  replica_supervisor supervisor_;
  router router_;
  request_book book_;
  request_book::deliveries parked_;  ///< for channels, from threads other than the delivery thread
  /// A request is moved at most this many times: one that fails every replica it reaches is failed itself.
  static constexpr int32_t max_moves = 3;
  /// A lockstep set's running requests resume after its restart once; the set failing again with one fails it.
  static constexpr int32_t max_set_resumes = 1;
  std::atomic<uint64_t> next_id_{1};
  bool stopping_ = false;
  std::deque<failure_job> jobs_;
  std::condition_variable jobs_cv_;
  std::function<void(const std::string&)> fatal_handler_;
  std::thread supervisor_thread_;
};

}  // namespace actorllm::detail
