// The transfers between two expert placements (model/expert_moves): kept experts stay in their slots, every changed
// slot gets one source, local copies first.
#include "model/expert_moves.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

using namespace actorllm::model;

namespace {

layer_placement placement_of(std::vector<int32_t> phys_to_log, int64_t n_logical) {
  layer_placement p;
  p.log_count.assign(static_cast<size_t>(n_logical), 0);
  for (int32_t e : phys_to_log)
    p.replica.push_back(p.log_count[static_cast<size_t>(e)]++);
  p.phys_to_log = std::move(phys_to_log);
  return p;
}

/// The experts of rank r's slots, sorted (which experts a rank holds, whatever their slots).
std::vector<int32_t> held(const layer_placement& p, int64_t r, int64_t per_rank) {
  std::vector<int32_t> out(p.phys_to_log.begin() + r * per_rank, p.phys_to_log.begin() + (r + 1) * per_rank);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("keep_in_place: a rank's kept experts stay in their slots, the rest fill its free slots in order") {
  // 2 ranks of 3 slots. Rank 0 held 0 1 2 and gets 2 0 3: 0 and 2 stay in slots 0 and 2, 3 takes slot 1. Rank 1
  // held 3 0 1 and gets 1 1 0: the first 1 and the 0 stay (slots 5 and 4), the second 1 takes slot 3.
  const layer_placement old = placement_of({0, 1, 2, 3, 0, 1}, 4);
  const layer_placement next = placement_of({2, 0, 3, 1, 1, 0}, 4);
  const layer_placement kept = keep_in_place(old, next, 2);
  CHECK(kept.phys_to_log == std::vector<int32_t>{0, 3, 2, 1, 0, 1});
  CHECK(kept.log_count == next.log_count);
  const auto moves = plan_moves(old, kept, 2);
  // Slot 1 (rank 0) gets expert 3 from slot 3 (rank 1); slot 3 gets expert 1 from slot 5 (its own rank).
  CHECK(moves == std::vector<expert_move>{{1, 3}, {3, 5}});
}

TEST_CASE("plan_moves: nothing for an unchanged placement, a local source before a remote one") {
  const layer_placement p = placement_of({0, 1, 2, 3}, 4);
  CHECK(plan_moves(p, p, 2).empty());
  // Rank 1 (slots 2, 3) swaps its experts for 0 and 2: 0 comes from rank 0's slot 0, 2 from its own slot 2.
  const layer_placement next = placement_of({0, 1, 0, 2}, 4);
  CHECK(plan_moves(p, next, 2) == std::vector<expert_move>{{2, 0}, {3, 2}});
}

TEST_CASE("keep_in_place and plan_moves on random placements: the same experts per rank, each move from a holder") {
  std::mt19937 rng{3};
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n_ranks = 1 + static_cast<int64_t>(rng() % 4);
    const int64_t n_logical = 4 + static_cast<int64_t>(rng() % 6);
    const int64_t per_rank = (n_logical + n_ranks - 1) / n_ranks + static_cast<int64_t>(rng() % 2);
    const int64_t n_physical = per_rank * n_ranks;
    auto random_placement = [&] {
      std::vector<int32_t> slots(static_cast<size_t>(n_physical));
      for (int64_t s = 0; s < n_physical; ++s)  // every expert once, then random copies
        slots[static_cast<size_t>(s)] = static_cast<int32_t>(s < n_logical ? s : rng() % n_logical);
      std::shuffle(slots.begin(), slots.end(), rng);
      return placement_of(slots, n_logical);
    };
    const layer_placement old = random_placement();
    const layer_placement next = random_placement();
    const layer_placement kept = keep_in_place(old, next, n_ranks);
    for (int64_t r = 0; r < n_ranks; ++r)
      CHECK(held(kept, r, per_rank) == held(next, r, per_rank));
    // A slot whose old expert the rank keeps is not moved.
    for (int64_t s = 0; s < n_physical; ++s) {
      const auto mine = held(next, s / per_rank, per_rank);
      if (std::find(mine.begin(), mine.end(), old.phys_to_log[static_cast<size_t>(s)]) != mine.end() &&
          std::count(mine.begin(), mine.end(), old.phys_to_log[static_cast<size_t>(s)]) >=
              std::count(old.phys_to_log.begin() + s / per_rank * per_rank,
                         old.phys_to_log.begin() + (s / per_rank + 1) * per_rank,
                         old.phys_to_log[static_cast<size_t>(s)]))
        CHECK(kept.phys_to_log[static_cast<size_t>(s)] == old.phys_to_log[static_cast<size_t>(s)]);
    }
    // Applying the moves to the old slots gives the new placement.
    std::vector<int32_t> applied = old.phys_to_log;
    for (const expert_move& m : plan_moves(old, kept, n_ranks)) {
      CHECK(old.phys_to_log[static_cast<size_t>(m.src)] == kept.phys_to_log[static_cast<size_t>(m.dst)]);
      applied[static_cast<size_t>(m.dst)] = old.phys_to_log[static_cast<size_t>(m.src)];
    }
    CHECK(applied == kept.phys_to_log);
  }
}
