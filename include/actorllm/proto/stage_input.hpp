// What one pipeline stage hands the next (and the scheduler hands the first): the step's plan, shared by every
// shard of the replica without copies, and the hidden states of the previous stage (empty for the first).
#pragma once

#include "actorllm/proto/step_plan.hpp"

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include <memory>
#include <vector>

namespace actorllm::proto {

/// A step's input to one shard. Within a process the plan is shared (one allocation for all shards and stages);
/// serialized, it is written out in full. Hidden states cross processes over the data plane in multi-process
/// executors, never as CAF messages: the in-process executor is the only one that sends them here.
struct stage_input {
  std::shared_ptr<const step_plan> plan;  ///< never null
  std::vector<float> hidden;              ///< [n_tokens, n_embd] from the previous stage; empty on the first

  friend bool operator==(const stage_input& a, const stage_input& b) {
    return (a.plan == b.plan || (a.plan && b.plan && *a.plan == *b.plan)) && a.hidden == b.hidden;
  }
};

/// CAF inspection of stage_input: the plan by value.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_input& x) {
  step_plan loaded;
  step_plan& plan = Inspector::reads_state && x.plan ? const_cast<step_plan&>(*x.plan) : loaded;
  return f(caf::meta::type_name("stage_input"), plan, x.hidden, caf::meta::load_callback([&]() -> caf::error {
             x.plan = std::make_shared<const step_plan>(std::move(loaded));
             return caf::none;
           }));
}

}  // namespace actorllm::proto
