// The meeting of a GPU check round: see gpu_check_peers.hpp.
#include "comm/check/gpu_check_peers.hpp"

#include "comm/device_communicator.hpp"
#include "kernels/device.hpp"

#include <string>

namespace actorllm::comm {

gpu_check_peers meet_gpu_check_peers(rendezvous_store& store, const comm_check_request& req,
                                     std::chrono::milliseconds timeout) {
  gpu_check_peers out;
  if (const int gpus = visible_gpu_count(); gpus > 0)
    out.be = make_backend(device_for_rank(device_kind::cuda, req.device, gpus), 1);
  const rank_device mine{out.be ? gpu_identity(*out.be) : std::string{}, nccl_built()};
  out.devices = exchange_rank_devices(store, device_group_key(req.group_name, 0), req.rank, req.world, mine, timeout);
  return out;
}

}  // namespace actorllm::comm
