// The scheduler's step watchdog.
#include "engine/step_watch.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorllm::engine {

step_watch::step_watch(std::chrono::milliseconds timeout) : timeout_(timeout), pace_(timeout) {}

void step_watch::dispatched(uint64_t step_id, int64_t tokens, clock::time_point now) {
  in_flight_.emplace(step_id, in_flight{now, tokens});
}

void step_watch::completed(uint64_t step_id, clock::time_point now) {
  auto it = in_flight_.find(step_id);
  if (it == in_flight_.end())
    return;
  pace_.observe(it->second.tokens, now - it->second.since);
  in_flight_.erase(it);
}

bool step_watch::arm() {
  if (timeout_.count() <= 0 || armed_)
    return false;
  armed_ = true;
  return true;
}

std::chrono::milliseconds step_watch::interval() const {
  return std::clamp(timeout_ / 4, std::chrono::milliseconds{10}, std::chrono::milliseconds{1000});
}

std::string step_watch::check(clock::time_point now, uint64_t work_done) {
  // The first count only sets the mark: what it holds may have been done before any step in flight went out.
  if (counted_ && work_done != work_done_)
    progressed_at_ = now;
  work_done_ = work_done;
  counted_ = true;
  return check(now);
}

std::string step_watch::check(clock::time_point now) {
  armed_ = false;
  for (const auto& [step, f] : in_flight_) {
    const auto limit = pace_.limit(f.tokens);
    // Progress since the step went out restarts its clock: a slow step is still being computed.
    const clock::time_point answered = std::max(f.since, progressed_at_);
    if (now - answered > limit)
      return fmt::format(
          "step {} got no result within {:.1f} s{} (the step timeout of {:.1f} s, stretched for its {} "
          "tokens at the recent pace of {:.3f} s per token): a shard, or a link between stages, stopped "
          "answering",
          step, std::chrono::duration<double>(limit).count(),
          answered > f.since ? fmt::format(" of the last progress ({:.1f} s after it went out)",
                                           std::chrono::duration<double>(answered - f.since).count())
                             : std::string{},
          std::chrono::duration<double>(timeout_).count(), f.tokens, pace_.seconds_per_token());
  }
  return {};
}

}  // namespace actorllm::engine
