// Where a shard's step inputs meet: every step's plan comes straight from the scheduler, and on a later stage the
// previous stage's output for that step (stage_handoff) comes separately, in either order. The inbox hands the
// steps out in plan order, each once its handoff is in (when the shard expects one). A plain class.
#pragma once

#include "engine/step_plan.hpp"
#include "runner/stage_handoff.hpp"

#include <deque>
#include <map>
#include <memory>
#include <optional>

namespace actorllm::runner {

/// A step ready to run: its plan and what the previous stage handed over (empty when none is expected).
struct ready_step {
  std::shared_ptr<const engine::step_plan> plan;
  stage_handoff handoff;
};

/// Plans in arrival order, handoffs by step.
class step_inbox {
 public:
  /// `expects_handoff`: every step waits for the previous stage's handoff (a later stage whose hidden states, or
  /// expert totals, come as a message); otherwise a plan is ready at once.
  explicit step_inbox(bool expects_handoff = false) : expects_handoff_(expects_handoff) {}
  void expect_handoff(bool expects) { expects_handoff_ = expects; }

  /// Queues a plan (plans run in the order they are pushed).
  void push(std::shared_ptr<const engine::step_plan> plan) { plans_.push_back(std::move(plan)); }
  /// Keeps the previous stage's output until its plan's turn.
  void push(stage_handoff handoff);

  /// The oldest plan with its handoff, when it is ready to run; nullopt when no plan is queued or the oldest still
  /// waits for its handoff.
  std::optional<ready_step> next();

  /// Plans queued, ready or not.
  size_t n_plans() const { return plans_.size(); }
  /// Handoffs that arrived before their plan's turn.
  size_t n_handoffs() const { return handoffs_.size(); }

 private:
  bool expects_handoff_ = false;
  std::deque<std::shared_ptr<const engine::step_plan>> plans_;
  std::map<uint64_t, stage_handoff> handoffs_;
};

}  // namespace actorllm::runner
