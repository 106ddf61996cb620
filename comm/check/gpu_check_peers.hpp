// How the ranks of a GPU round of `actorllm check` (NCCL's, the custom all-reduce's) meet: each takes the GPU its
// device index on the node names (modulo the GPUs it sees), says which one it is, and learns every other rank's, so
// that all of them decide alike whether the round applies.
#pragma once

#include "comm/check/check_round.hpp"
#include "comm/device_rendezvous.hpp"
#include "comm/rendezvous_store.hpp"
#include "kernels/backend.hpp"

#include <chrono>
#include <memory>
#include <vector>

namespace actorllm::comm {

/// This rank's GPU and what every rank of the check said of its own.
struct gpu_check_peers {
  std::unique_ptr<backend> be;       ///< this rank's GPU; null where it sees none
  std::vector<rank_device> devices;  ///< in rank order
};

/// Opens this rank's GPU for `req` and exchanges every rank's device through `store` (keys under
/// device_group_key(req.group_name, 0)), waiting up to `timeout` for the others. Throws what the exchange
/// throws.
gpu_check_peers meet_gpu_check_peers(rendezvous_store& store, const comm_check_request& req,
                                     std::chrono::milliseconds timeout);

}  // namespace actorllm::comm
