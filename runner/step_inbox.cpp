// A shard's step inputs, paired.
#include "runner/step_inbox.hpp"

namespace actorllm::runner {

void step_inbox::push(stage_handoff handoff) {
  const uint64_t step = handoff.step_id;
  handoffs_.insert_or_assign(step, std::move(handoff));
}

std::optional<ready_step> step_inbox::next() {
  if (plans_.empty())
    return std::nullopt;
  ready_step out;
  if (expects_handoff_) {
    auto it = handoffs_.find(plans_.front()->step_id);
    if (it == handoffs_.end())
      return std::nullopt;
    out.handoff = std::move(it->second);
    handoffs_.erase(it);
  }
  out.plan = std::move(plans_.front());
  plans_.pop_front();
  return out;
}

}  // namespace actorllm::runner
