// How the expert slots of one MoE layer get from one placement to the next (model/expert_rebalance): which slots
// must receive another expert's weights and from which slot of the old placement, with as little moved as possible.
// Pure functions: every rank of the EP group derives the same moves from the same two placements, so the sender and
// the receiver of each expert agree without a message.
#pragma once

#include "model/expert_rebalance.hpp"

#include <cstdint>
#include <vector>

namespace actorllm::model {

/// `next` with each rank's slots reordered so that an expert the rank already held stays in the slot it was in
/// (the algorithm decides which experts a rank holds, not in which of its slots): those slots need no transfer.
/// Ranks hold n_physical / n_ranks consecutive slots. Deterministic.
layer_placement keep_in_place(const layer_placement& old, const layer_placement& next, int64_t n_ranks);

/// One transfer: slot `dst` receives the weights slot `src` holds in the old placement.
struct expert_move {
  int32_t dst = 0;
  int32_t src = 0;
  friend bool operator==(const expert_move&, const expert_move&) = default;
};

/// The transfers from `old` to `next`, ordered by destination slot: one for every slot whose expert changes, from a
/// slot of the same rank that held the expert when there is one (a local copy), else from the lowest slot that held
/// it. Every expert of `next` is held somewhere in `old` (both place every expert).
std::vector<expert_move> plan_moves(const layer_placement& old, const layer_placement& next, int64_t n_ranks);

}  // namespace actorllm::model
