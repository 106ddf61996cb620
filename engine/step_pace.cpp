// The step limit that grows with the step.
#include "engine/step_pace.hpp"

#include <algorithm>
#include <cmath>

namespace actorllm::engine {

step_pace::step_pace(std::chrono::milliseconds timeout, double stretch) : timeout_(timeout), stretch_(stretch) {}

void step_pace::observe(int64_t tokens, std::chrono::nanoseconds took) {
  if (tokens <= 0 || took.count() < 0)
    return;
  const double pace = std::chrono::duration<double>(took).count() / static_cast<double>(tokens);
  seconds_per_token_ = std::max(pace, seconds_per_token_ * 0.9);
}

std::chrono::milliseconds step_pace::limit(int64_t tokens) const {
  if (timeout_.count() <= 0)
    return std::chrono::milliseconds{0};
  const double expected = stretch_ * seconds_per_token_ * static_cast<double>(std::max<int64_t>(tokens, 1));
  // Bounded so the conversion cannot overflow: a day is beyond any step worth waiting for.
  const double ms = std::min(expected * 1000.0, 86'400'000.0);
  return std::max(timeout_, std::chrono::milliseconds{static_cast<int64_t>(std::ceil(ms))});
}

}  // namespace actorllm::engine
