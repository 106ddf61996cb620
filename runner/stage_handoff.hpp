// What one pipeline stage hands the same tp rank of the next stage for a step (the plan itself reaches every shard
// straight from the scheduler): the hidden states when both live in one process, and on tp rank 0 of an MoE model the
// expert load counted so far, on its way to the sampler shard's step_result. A plain struct: the protocol
// (proto/stage_handoff.hpp) has its CAF inspection.
#pragma once

#include "kernels/tensor.hpp"

#include <cstdint>
#include <vector>

namespace actorllm::runner {

/// Host floats of a hidden-state tensor (for serialization and comparison; empty for a device tensor, which never
/// travels as a message).
inline std::vector<float> hidden_floats(const tensor& t) {
  if (t.empty() || t.type != dtype::f32 || t.where().kind != device_kind::cpu)
    return {};
  const float* p = t.data_as<float>();
  return std::vector<float>(p, p + t.numel());
}

/// Step `step_id`'s output of one stage for the same tp rank of the next. Hidden states cross processes over the
/// data plane in multi-process executors, never as CAF messages: there a handoff goes out only to carry expert
/// totals (tp rank 0 of an MoE model), with `hidden` empty.
struct stage_handoff {
  uint64_t step_id = 0;
  tensor hidden;  ///< f32 [n_tokens, n_embd] (in-process executor only); empty otherwise
  /// MoE models: tokens routed to each expert so far over the MoE layers of the stages up to the sender (their rank
  /// 0's totals, summed); the last stage adds its own and reports them in step_result::expert_tokens.
  std::vector<uint64_t> expert_tokens;

  /// Equal steps, expert totals and hidden values (host tensors compare by value, whatever their buffers).
  friend bool operator==(const stage_handoff& a, const stage_handoff& b) {
    if (a.step_id != b.step_id || a.expert_tokens != b.expert_tokens)
      return false;
    if (a.hidden.buf == b.hidden.buf && a.hidden.offset == b.hidden.offset && a.hidden.shape == b.hidden.shape)
      return true;
    return a.hidden.numel() == b.hidden.numel() && hidden_floats(a.hidden) == hidden_floats(b.hidden);
  }
};

}  // namespace actorllm::runner
