// Expert-parallel load balancing at run time (vLLM's EplbState): the placement of every MoE layer's experts on the
// physical slots of the EP group, the choice of a replica for each routed token, the sliding window of the experts'
// load, and the periodic rearrangement that moves expert weights between the ranks.
//
// Every rank of the EP group runs each step once (busy, or idle under lockstep data parallelism) and calls end_step
// after it, so the step counter is the same everywhere; every step_interval steps they all rearrange together: the
// window's load is gathered over the group (the same sum on every rank), each rank computes the same new placement
// (model/expert_rebalance, a pure function), and the experts whose slot changes move over the EP collective's
// all-to-all as raw bytes. It runs between two steps, never inside one: the next step waits for it, and that wait is
// the stall (bounded by one gather of the load, the algorithm, and per MoE layer one all-to-all carrying at most the
// rank's slots; measured as last_stall_seconds). No request is dropped: steps are only delayed.
#pragma once

#include "comm/collective.hpp"
#include "kernels/backend.hpp"
#include "model/eplb_stats.hpp"
#include "model/expert_moves.hpp"
#include "model/expert_rebalance.hpp"
#include "model/model_config.hpp"
#include "model/moe_weights.hpp"
#include "model/weight_table.hpp"

#include <cstdint>
#include <vector>

namespace actorllm::model {

/// The balancing state of one shard's MoE layers.
class expert_balancer {
 public:
  /// One MoE layer of the shard: its global index and this rank's slots' weights (which must outlive the balancer;
  /// their tensors are overwritten in place when experts move).
  struct layer_ref {
    int64_t layer = 0;
    const moe_weights* weights = nullptr;
  };

  /// shard.eplb must be on, with expert parallelism over `ep_comm` (shard.ep_size() ranks). Starts from vLLM's
  /// initial placement (slot s holds expert s mod n_expert), as the weights were loaded.
  expert_balancer(const model_config& cfg, const shard_spec& shard, tp_collective& ep_comm,
                  std::vector<layer_ref> layers);

  /// The physical slot that serves expert `expert` for the routed pair of token `token` in layer `layer`: one of its
  /// replicas, taken in turn by token index and step so that each replica gets its share.
  int32_t slot_for(int64_t layer, int32_t expert, int64_t token) const;
  /// Counts one routed pair, by the rank that sends it (each pair of the EP group is counted once).
  void count(int64_t layer, int32_t expert, int32_t slot);
  /// After each step, on every rank of the group: advances the window, and every step_interval steps rearranges
  /// (collectives over the group; uploads to `be`). Returns whether it rearranged.
  bool end_step(backend& be);

  const eplb_stats& stats() const { return stats_; }
  /// The placement layer `layer` uses now.
  const layer_placement& placement(int64_t layer) const;

 private:
  struct layer_state {
    int64_t layer = 0;
    const moe_weights* weights = nullptr;
    layer_placement placement;
    std::vector<std::vector<int32_t>> replicas;  // per logical expert: its slots, ascending
  };
  size_t local_index(int64_t layer) const;
  void set_placement(layer_state& l, layer_placement p);
  void rearrange(backend& be);
  /// Moves the experts of one layer from its current placement to `next` (every rank calls it with the same moves).
  void exchange(backend& be, const layer_state& l, const std::vector<expert_move>& moves);

  model_config cfg_;
  expert_balancing settings_;
  tp_collective& ep_comm_;
  int64_t n_ranks_ = 1;
  int64_t n_physical_ = 0;
  int64_t slots_per_rank_ = 0;
  std::vector<layer_state> layers_;
  std::vector<int32_t> local_of_layer_;  // global layer -> index in layers_, or -1
  uint64_t steps_ = 0;
  // The window: per step, tokens per (local layer, logical expert); its running sum; this step's counts.
  std::vector<std::vector<uint32_t>> ring_;
  size_t ring_next_ = 0;
  std::vector<uint64_t> window_sum_;
  std::vector<uint32_t> current_;
  std::vector<uint64_t>
      slot_tokens_;  // per (local layer, slot): pairs this rank sent there since the last rearrangement
  eplb_stats stats_;
  std::vector<float> send_, recv_;
};

}  // namespace actorllm::model
