// The data plane between pipeline stages: hidden states from one stage's tp rank to the same rank of the next when
// they live in different processes (comm/group_transports builds one over NCCL or Gloo).
#pragma once

#include "kernels/tensor.hpp"

#include <cstdint>

namespace actorllm {

/// Carries hidden states between the same tp rank of two adjacent stages when they live in different processes
/// (the data plane): the plan reaches every shard from the scheduler in a CAF message, the floats never do.
class activation_link {
 public:
  virtual ~activation_link() = default;
  /// Sends step `step_id`'s hidden states (an f32 backend tensor) to the next stage.
  virtual void send(uint64_t step_id, const tensor& hidden) = 0;
  /// Receives step `step_id`'s hidden states from the previous stage into `hidden` (allocated by the receiver with
  /// the expected shape). Throws on timeout or a lost peer.
  virtual void recv(uint64_t step_id, const tensor& hidden) = 0;
  /// Whether send and recv take tensors on the shard's GPU (NCCL); false: host memory (Gloo).
  virtual bool takes_device_tensors() const { return false; }
  /// Throws when a transfer queued earlier failed (a device link learns of it after send/recv returned).
  virtual void raise_if_broken() {}
};

}  // namespace actorllm
