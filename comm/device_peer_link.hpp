// Point-to-point transfers of device tensors between the ranks of a device communicator: how a pipeline stage on one
// GPU hands its hidden states to the next stage's GPU without a trip through host memory (NCCL send/recv).
#pragma once

#include "kernels/tensor.hpp"

namespace actorllm {

/// Queued transfers of tensors on the communicator's GPU. Transfers between two ranks match in the order they are
/// queued; both sides give the same dtype and element count. Failures (a peer gone) surface in raise_if_broken().
class device_peer_link {
 public:
  virtual ~device_peer_link() = default;
  /// Queues sending `t` to rank `peer`; returns before the transfer runs (it is ordered on the backend's stream).
  virtual void send(const tensor& t, int peer) = 0;
  /// Queues receiving into `t` what rank `peer` sends; work queued after it on the stream sees the data.
  virtual void recv(const tensor& t, int peer) = 0;
  /// Throws comm::comm_error when the link broke (see tp_collective::raise_if_broken).
  virtual void raise_if_broken() = 0;
};

}  // namespace actorllm
