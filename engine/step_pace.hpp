// When a step in flight counts as lost. A shard in another process that dies is noticed at once (its link goes
// down); the step timeout is for the rest, a shard or link that hangs. A fixed limit cannot tell a hang from a step
// that is merely slow (a long prefill, or every step while the cores are shared with other work: the first busy-machine
// run saw a 1,000-token prefill pass 300 s), so the limit grows with the step: the configured timeout, or `stretch`
// times what the step's tokens take at the slowest recent pace, whichever is longer.
#pragma once

#include <chrono>
#include <cstdint>

namespace actorllm::engine {

class step_pace {
 public:
  /// `timeout`: the configured step timeout (zero: no limit at all). `stretch`: how many times the expected
  /// duration a step may take.
  explicit step_pace(std::chrono::milliseconds timeout, double stretch = 8.0);

  /// A step of `tokens` query tokens got its result `took` after it went out.
  void observe(int64_t tokens, std::chrono::nanoseconds took);

  /// How long a step of `tokens` may take; zero when there is no limit.
  std::chrono::milliseconds limit(int64_t tokens) const;

  /// The pace limit() uses: the slowest seconds per token of recent steps, each step's weight decaying by a tenth
  /// per later step (0 before the first result).
  double seconds_per_token() const { return seconds_per_token_; }

 private:
  std::chrono::milliseconds timeout_;
  double stretch_;
  double seconds_per_token_ = 0.0;
};

}  // namespace actorllm::engine
