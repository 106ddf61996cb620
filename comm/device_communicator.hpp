// The device communicators this build has, for code that must compile without them (the shard, `actorllm check`):
// whether NCCL is built in, which physical GPU a backend runs on, and the NCCL communicator behind the tp_collective
// interface. Without NCCL (no nccl.h / libnccl at configure time) the calls that need it throw, naming why.
#pragma once

#include "comm/collective.hpp"
#include "comm/device_peer_link.hpp"
#include "kernels/backend.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace actorllm {

/// Whether this build has the NCCL communicator (ACTORLLM_HAVE_NCCL).
bool nccl_built();

/// The NCCL library's version ("2.28.9"), or why there is none ("not built with NCCL").
std::string nccl_version();

/// The physical GPU `be` runs on as "<host>/<PCI bus id>" (the same in every process on that host, whatever
/// CUDA_VISIBLE_DEVICES says); empty for a backend that is not on a GPU.
std::string gpu_identity(backend& be);

/// A device communicator and the way to abort it from another thread.
struct device_communicator {
  std::unique_ptr<tp_collective> collective;
  /// The same communicator's point-to-point transfers (owned by `collective`).
  device_peer_link* peer_link = nullptr;
  /// Aborts the communicator from any thread; stays safe (a no-op) after the collective is gone.
  std::function<void(const std::string&)> abort;
};

/// A fresh NCCL unique id, made by rank 0. Throws std::runtime_error without NCCL.
std::vector<char> make_nccl_unique_id();

/// Joins the NCCL communicator `unique_id` names as `rank` of `size` on `be` (a CUDA backend, outliving the result).
/// `group` names it in messages; `timeout` bounds every operation, and its creation (at least 30 s). Throws
/// std::runtime_error without NCCL or for a backend that is not CUDA, comm::comm_error when the communicator cannot
/// be made.
device_communicator make_nccl_communicator(std::span<const char> unique_id, int rank, int size, backend& be,
                                           const std::string& group, std::chrono::milliseconds timeout);

}  // namespace actorllm
