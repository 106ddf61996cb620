// What one pipeline stage hands the next (and the scheduler hands the first): the step's plan, shared by every
// shard of the replica without copies, and the hidden states of the previous stage (empty for the first).
#pragma once

#include "actorllm/proto/step_plan.hpp"
#include "kernels/tensor.hpp"

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include <algorithm>
#include <memory>
#include <vector>

namespace actorllm::proto {

/// Host floats of a hidden-state tensor (for serialization and comparison; empty for a device tensor, which never
/// travels as a message).
inline std::vector<float> hidden_floats(const tensor& t) {
  if (t.empty() || t.type != dtype::f32 || t.where().kind != device_kind::cpu)
    return {};
  const float* p = t.data_as<float>();
  return std::vector<float>(p, p + t.numel());
}

/// A step's input to one shard. Within a process the plan is shared (one allocation for all shards and stages) and
/// the hidden states are a backend tensor handed over without a copy (a device backend keeps them on its device);
/// serialized, the plan is written out in full. Hidden states cross processes over the data plane in multi-process
/// executors, never as CAF messages: the in-process executor is the only one that sends them here.
struct stage_input {
  std::shared_ptr<const step_plan> plan;  ///< never null
  tensor hidden;                          ///< f32 [n_tokens, n_embd] from the previous stage; empty on the first
  /// MoE models: tokens routed to each expert so far over the MoE layers of the stages before this one (their rank
  /// 0's totals, summed); the last stage adds its own and reports them in step_result::expert_tokens.
  std::vector<uint64_t> expert_tokens;

  /// Equal plans and equal hidden values (host tensors compare by value, whatever their buffers).
  friend bool operator==(const stage_input& a, const stage_input& b) {
    const bool same_plan =
        (a.plan == b.plan || (a.plan && b.plan && *a.plan == *b.plan)) && a.expert_tokens == b.expert_tokens;
    if (a.hidden.buf == b.hidden.buf && a.hidden.offset == b.hidden.offset && a.hidden.shape == b.hidden.shape)
      return same_plan;
    return same_plan && a.hidden.numel() == b.hidden.numel() && hidden_floats(a.hidden) == hidden_floats(b.hidden);
  }
};

/// CAF inspection of stage_input: the plan by value; hidden states in host memory as floats ([n_tokens, rest]).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_input& x) {
  step_plan loaded;
  step_plan& plan = Inspector::reads_state && x.plan ? const_cast<step_plan&>(*x.plan) : loaded;
  std::vector<float> hidden = Inspector::reads_state ? hidden_floats(x.hidden) : std::vector<float>{};
  return f(
      caf::meta::type_name("stage_input"), plan, hidden, x.expert_tokens, caf::meta::load_callback([&]() -> caf::error {
        x.plan = std::make_shared<const step_plan>(std::move(loaded));
        x.hidden = tensor{};
        if (!hidden.empty()) {
          const auto n = static_cast<int64_t>(hidden.size());
          const auto rows = static_cast<int64_t>(x.plan->tokens.size());
          x.hidden =
              make_host_tensor(dtype::f32, rows > 0 && n % rows == 0 ? tensor_shape{rows, n / rows} : tensor_shape{n});
          std::copy(hidden.begin(), hidden.end(), x.hidden.data_as<float>());
        }
        return caf::none;
      }));
}

}  // namespace actorllm::proto
