// Placement-to-placement transfers of expert weights: see expert_moves.hpp.
#include "model/expert_moves.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace actorllm::model {

layer_placement keep_in_place(const layer_placement& old, const layer_placement& next, int64_t n_ranks) {
  const auto n_physical = static_cast<int64_t>(next.phys_to_log.size());
  const int64_t per_rank = n_physical / n_ranks;
  layer_placement out = next;
  for (int64_t r = 0; r < n_ranks; ++r) {
    const int64_t begin = r * per_rank;
    // The rank's new slots, as (expert, replica) pairs still to place.
    std::vector<bool> placed(static_cast<size_t>(per_rank), false);
    std::vector<bool> taken(static_cast<size_t>(per_rank), false);
    // First every slot whose old expert the rank keeps: it keeps its slot.
    for (int64_t i = 0; i < per_rank; ++i) {
      const int32_t e = old.phys_to_log[static_cast<size_t>(begin + i)];
      for (int64_t j = 0; j < per_rank; ++j) {
        if (placed[static_cast<size_t>(j)] || next.phys_to_log[static_cast<size_t>(begin + j)] != e)
          continue;
        out.phys_to_log[static_cast<size_t>(begin + i)] = e;
        out.replica[static_cast<size_t>(begin + i)] = next.replica[static_cast<size_t>(begin + j)];
        placed[static_cast<size_t>(j)] = true;
        taken[static_cast<size_t>(i)] = true;
        break;
      }
    }
    // Then the rest, in the algorithm's order, into the free slots in slot order.
    int64_t free_slot = 0;
    for (int64_t j = 0; j < per_rank; ++j) {
      if (placed[static_cast<size_t>(j)])
        continue;
      while (taken[static_cast<size_t>(free_slot)])
        ++free_slot;
      out.phys_to_log[static_cast<size_t>(begin + free_slot)] = next.phys_to_log[static_cast<size_t>(begin + j)];
      out.replica[static_cast<size_t>(begin + free_slot)] = next.replica[static_cast<size_t>(begin + j)];
      taken[static_cast<size_t>(free_slot)] = true;
    }
  }
  return out;
}

std::vector<expert_move> plan_moves(const layer_placement& old, const layer_placement& next, int64_t n_ranks) {
  const auto n_physical = static_cast<int64_t>(next.phys_to_log.size());
  if (static_cast<int64_t>(old.phys_to_log.size()) != n_physical || n_ranks < 1 || n_physical % n_ranks != 0)
    throw std::invalid_argument("plan_moves: both placements must have the same slots, split evenly over the ranks");
  const int64_t per_rank = n_physical / n_ranks;
  std::vector<expert_move> moves;
  for (int64_t dst = 0; dst < n_physical; ++dst) {
    const int32_t e = next.phys_to_log[static_cast<size_t>(dst)];
    if (old.phys_to_log[static_cast<size_t>(dst)] == e)
      continue;
    const int64_t rank_begin = dst / per_rank * per_rank;
    int64_t src = -1;
    for (int64_t s = rank_begin; s < rank_begin + per_rank && src < 0; ++s)
      if (old.phys_to_log[static_cast<size_t>(s)] == e)
        src = s;
    for (int64_t s = 0; s < n_physical && src < 0; ++s)
      if (old.phys_to_log[static_cast<size_t>(s)] == e)
        src = s;
    if (src < 0)
      throw std::invalid_argument(fmt::format("plan_moves: expert {} is in no slot of the old placement", e));
    moves.push_back({static_cast<int32_t>(dst), static_cast<int32_t>(src)});
  }
  return moves;
}

}  // namespace actorllm::model
