// The replicas' restart policy: see replica_supervisor.hpp.
#include "api/replica_supervisor.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorllm::detail {

replica_supervisor::replica_supervisor(int32_t n_replicas, policy p, std::vector<int32_t> ranks)
    : policy_(p), ranks_(std::move(ranks)), replicas_(static_cast<size_t>(std::max(n_replicas, 0))) {}

int32_t replica_supervisor::rank_of(int32_t replica) const {
  return static_cast<size_t>(replica) < ranks_.size() ? ranks_[static_cast<size_t>(replica)] : replica;
}

replica_supervisor::decision replica_supervisor::next_try(int32_t index) {
  replica_state& r = replicas_.at(static_cast<size_t>(index));
  decision d;
  if (!policy_.restart) {
    r.st = state::given_up;
    d.why = fmt::format("replica {}: worker restarts are off (restart_workers = false): {}", rank_of(index), r.failure);
    return d;
  }
  if (r.restarts >= policy_.max_restarts) {
    r.st = state::given_up;
    d.why = fmt::format("replica {}: gave up after {} restart(s): {}", rank_of(index), r.restarts, r.failure);
    return d;
  }
  // A replica that served is rebuilt at once; after a failed try wait 1, 2, 4, 8 s, so a node agent that comes back
  // (restarted by its service manager, say) can still be placed before the restarts run out.
  d.restart = true;
  d.wait = r.st == state::serving ? std::chrono::milliseconds{0}
                                  : std::chrono::milliseconds{1000LL << std::min(r.restarts - 1, 3)};
  ++r.restarts;
  r.st = state::restarting;
  d.why = fmt::format("replica {}: restart {} of at most {}", rank_of(index), r.restarts, policy_.max_restarts);
  return d;
}

std::optional<replica_supervisor::decision> replica_supervisor::on_failure(int32_t index, const std::string& reason) {
  replica_state& r = replicas_.at(static_cast<size_t>(index));
  if (r.st != state::serving)
    return std::nullopt;
  r.failure = reason;
  return next_try(index);  // rebuilding a replica that served counts as a restart
}

replica_supervisor::decision replica_supervisor::on_restart_failed(int32_t index, const std::string& reason) {
  replica_state& r = replicas_.at(static_cast<size_t>(index));
  r.failure = "restart failed: " + reason;
  return next_try(index);
}

void replica_supervisor::on_restarted(int32_t index) {
  replica_state& r = replicas_.at(static_cast<size_t>(index));
  r.st = state::serving;
  r.failure.clear();
}

bool replica_supervisor::any_serving() const {
  return std::any_of(replicas_.begin(), replicas_.end(), [](const replica_state& r) { return r.st == state::serving; });
}

bool replica_supervisor::all_given_up() const {
  return std::all_of(replicas_.begin(), replicas_.end(),
                     [](const replica_state& r) { return r.st == state::given_up; });
}

}  // namespace actorllm::detail
