// The step count that the schedulers of lockstep replicas keep equal (expert parallelism over data-parallel
// replicas, vLLM's lockstep DP+EP): every step of any replica runs the MoE layers' exchanges over the EP group that
// spans them all, so every replica must run as many steps as the busiest one. A replica with nothing of its own to
// run owes idle steps (a dummy batch) until it has dispatched as many as its peers. A plain class.
#pragma once

#include <algorithm>
#include <cstdint>

namespace actorllm::engine {

class lockstep_rounds {
 public:
  /// This replica dispatched a step (its own or an idle one); returns how many it has dispatched in all.
  uint64_t on_step() { return ++own_; }
  /// A peer said it has dispatched `round` steps.
  void peer_reached(uint64_t round) { peers_ = std::max(peers_, round); }
  /// Idle steps to dispatch now. Only while this replica has no step of its own in flight: that step's result comes
  /// back, and the next one (its own, or idle ones) pairs with the peers' then; catching up earlier would only add
  /// steps nobody waits for.
  uint64_t idle_steps_owed(bool step_in_flight) const { return step_in_flight || peers_ <= own_ ? 0 : peers_ - own_; }

  uint64_t dispatched() const { return own_; }
  uint64_t peers_reached() const { return peers_; }

 private:
  uint64_t own_ = 0;
  uint64_t peers_ = 0;
};

}  // namespace actorllm::engine
