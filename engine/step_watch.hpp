// The scheduler's step watchdog as a plain class: the steps in flight with when each went out and how many tokens it
// carries, the pace of recent steps (engine/step_pace.hpp), and the verdict of a periodic look: a step past its own
// limit means a shard, or a link between stages, stopped answering. A look may also bring the count of work the
// shards in this process have done (util/work_progress.hpp): while it moves they are computing, however slowly, so a
// step's limit runs from the last time it moved rather than from when the step went out; a shard in another process
// that dies is noticed by its link, not here. The caller supplies the time, so tests drive it with a clock of their
// own.
#pragma once

#include "engine/step_pace.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace actorllm::engine {

class step_watch {
 public:
  using clock = std::chrono::steady_clock;

  /// `timeout`: the configured step timeout (zero: never gives up on a step).
  explicit step_watch(std::chrono::milliseconds timeout);

  /// Step `step_id` of `tokens` query tokens went out at `now`.
  void dispatched(uint64_t step_id, int64_t tokens, clock::time_point now);
  /// Step `step_id`'s result came back at `now`: it no longer counts, and its duration feeds the pace. Unknown steps
  /// are ignored.
  void completed(uint64_t step_id, clock::time_point now);

  /// Whether the caller should schedule a look (check) now: a timeout is set and no look is pending. Marks one
  /// pending; check() clears it.
  bool arm();
  /// How long after arm() the look comes: a quarter of the timeout, between 10 ms and 1 s.
  std::chrono::milliseconds interval() const;

  /// The pending look, at `now`: every step in flight against its own limit (a long prefill behind a short decode
  /// step must not be judged by the decode step's limit, nor the other way round). Returns why the first one over
  /// its limit counts as lost, or empty when none is.
  std::string check(clock::time_point now);
  /// The same, with the work count of the shards in this process at `now`: when it moved since the last look, every
  /// step in flight counts as answering until `now`, and only a stretch without progress longer than its limit loses
  /// it.
  std::string check(clock::time_point now, uint64_t work_done);

  /// Steps in flight.
  size_t n_in_flight() const { return in_flight_.size(); }
  /// The pace the limits stretch with.
  const step_pace& pace() const { return pace_; }

 private:
  struct in_flight {
    clock::time_point since;  // when it went out
    int64_t tokens = 0;       // its query tokens
  };

  std::chrono::milliseconds timeout_;
  step_pace pace_;
  std::map<uint64_t, in_flight> in_flight_;
  bool armed_ = false;
  bool counted_ = false;               // whether a look brought a work count yet
  uint64_t work_done_ = 0;             // the count at the last look that brought one
  clock::time_point progressed_at_{};  // when a look last saw it move
};

}  // namespace actorllm::engine
