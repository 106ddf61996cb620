// The lockstep step count of expert parallelism over data-parallel replicas: idle steps make up exactly the
// difference to the busiest peer, never while a step of one's own is in flight, and never ahead of the peers.
#include "engine/lockstep_rounds.hpp"

#include <doctest/doctest.h>

#include <vector>

using actorllm::engine::lockstep_rounds;

TEST_CASE("lockstep rounds: an idle replica owes the peers' lead, a busy one nothing until its step is back") {
  lockstep_rounds r;
  CHECK(r.idle_steps_owed(false) == 0);
  r.peer_reached(3);
  CHECK(r.idle_steps_owed(false) == 3);
  CHECK(r.idle_steps_owed(true) == 0);  // its own step comes back first, then it pairs up
  for (int i = 0; i < 3; ++i)
    r.on_step();
  CHECK(r.idle_steps_owed(false) == 0);
  r.peer_reached(2);  // a late, older report changes nothing
  CHECK(r.peers_reached() == 3);
  CHECK(r.on_step() == 4);  // its own step: ahead of the peers, who now owe it one
  CHECK(r.idle_steps_owed(false) == 0);
}

TEST_CASE("lockstep rounds: three replicas exchanging reports end with equal step counts") {
  // Replica 0 runs 5 steps of its own, replica 1 runs 2, replica 2 none; each reports its own steps to the others,
  // and each catches up whenever it has nothing in flight (here: after every event).
  std::vector<lockstep_rounds> r(3);
  const std::vector<int> own_work{5, 2, 0};
  std::vector<int> left = own_work;
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t i = 0; i < r.size(); ++i) {
      if (left[i] > 0) {
        --left[i];
        const uint64_t round = r[i].on_step();
        for (size_t j = 0; j < r.size(); ++j)
          if (j != i)
            r[j].peer_reached(round);
        progress = true;
      }
      for (uint64_t n = r[i].idle_steps_owed(false); n > 0; --n) {
        r[i].on_step();
        progress = true;
      }
    }
  }
  for (const auto& x : r)
    CHECK(x.dispatched() == r[0].dispatched());
  // Replica 0 goes first in every round here, so the others' own steps pair with its: the busiest one's count.
  CHECK(r[0].dispatched() == 5);
}
