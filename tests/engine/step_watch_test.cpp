// step_watch: the scheduler's watchdog, on a clock the test moves: each step in flight against its own limit, the pace
// learnt from the results, at most one look pending, and no look at all without a timeout.
#include "engine/step_watch.hpp"

#include <doctest/doctest.h>

using actorllm::engine::step_watch;
using namespace std::chrono_literals;

TEST_CASE("step watch: a step past its limit is named, steps back in time are forgotten") {
  step_watch w{10s};
  const auto t0 = step_watch::clock::time_point{} + 1h;
  CHECK(w.interval() == 1000ms);  // a quarter of 10 s, at most a second
  CHECK(w.arm());
  CHECK_FALSE(w.arm());  // one look pending at a time
  w.dispatched(1, 4, t0);
  w.dispatched(2, 1, t0 + 1s);
  CHECK(w.check(t0 + 5s).empty());
  CHECK(w.arm());  // check() took the pending look
  w.completed(1, t0 + 6s);
  CHECK(w.n_in_flight() == 1);
  CHECK(w.pace().seconds_per_token() == doctest::Approx(1.5));
  w.completed(7, t0 + 6s);  // not in flight: ignored
  CHECK(w.n_in_flight() == 1);
  CHECK(w.check(t0 + 12s).empty());  // step 2 went out 11 s ago; its limit is 8 x 1.5 s = 12 s
  const std::string lost = w.check(t0 + 14s);
  CHECK(lost ==
        "step 2 got no result within 12.0 s (the step timeout of 10.0 s, stretched for its 1 tokens at the recent pace "
        "of 1.500 s per token): a shard, or a link between stages, stopped answering");
}

TEST_CASE("step watch: a long step is judged by its own stretched limit, and zero means no watch") {
  step_watch w{1s};
  const auto t0 = step_watch::clock::time_point{} + 1h;
  CHECK(w.interval() == 250ms);
  w.dispatched(1, 10, t0);
  w.completed(1, t0 + 1s);        // 0.1 s per token
  w.dispatched(2, 100, t0 + 1s);  // a prefill: 8 x 100 x 0.1 s = 80 s
  w.dispatched(3, 1, t0 + 1s);
  CHECK(w.check(t0 + 1s + 1500ms).find("step 3") != std::string::npos);  // the decode step's limit is 1 s
  step_watch off{0ms};
  CHECK_FALSE(off.arm());
  CHECK(off.interval() == 10ms);
}

TEST_CASE("step watch: a step far past the timeout is not lost while work progresses, and is once it stops") {
  // The first busy-machine run: a 1,000-token prefill as the engine's first step (no pace learnt yet), each layer
  // taking seconds while other work holds the cores. The old verdict came at the timeout; now the count of work done
  // in this process restarts the step's clock at every look that sees it move.
  step_watch w{300s};
  const auto t0 = step_watch::clock::time_point{} + 1h;
  uint64_t work = 5;
  CHECK(w.check(t0, work).empty());  // the first count only sets the mark
  w.dispatched(1, 1000, t0);
  auto t = t0;
  for (int look = 0; look < 40; ++look) {  // 40 looks 25 s apart: 1,000 s, more than three timeouts
    t += 25s;
    work += 1;  // a layer finished since the last look
    CHECK(w.check(t, work).empty());
  }
  CHECK(w.n_in_flight() == 1);
  // The shard hangs: the count stops. Lost once the step's limit has passed since the last progress.
  CHECK(w.check(t + 299s, work).empty());
  const std::string lost = w.check(t + 301s, work);
  CHECK(lost.find("step 1 got no result within 300.0 s of the last progress (1000.0 s after it went out)") == 0);
}

TEST_CASE("step watch: without a work count (shards in other processes) the limit runs from when the step went out") {
  step_watch w{300s};
  const auto t0 = step_watch::clock::time_point{} + 1h;
  w.dispatched(1, 1000, t0);
  CHECK(w.check(t0 + 299s).empty());
  CHECK_FALSE(w.check(t0 + 301s).empty());
  // A count that never moves is no progress either.
  step_watch still{300s};
  still.dispatched(1, 1000, t0);
  CHECK(still.check(t0 + 100s, 7).empty());
  CHECK(still.check(t0 + 200s, 7).empty());
  CHECK_FALSE(still.check(t0 + 301s, 7).empty());
}
