// How the ranks of a device communicator (NCCL) meet over the control plane. Rank 0 creates the communicator's
// unique id (128 opaque bytes) and publishes it through the rendezvous_store, which the multi-process executor
// implements over CAF messages; the other ranks read it. Before that every rank publishes which device it runs on,
// so that all of them can decide the same way whether a device communicator is possible at all (NCCL refuses two
// ranks on one GPU). NCCL's types stay out: the id travels as bytes, made by a function the caller passes.
#pragma once

#include "comm/rendezvous_store.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::comm {

/// The key prefix of device communicator `group` (a TP group's name, "<replica prefix>/tp/<stage>") in its
/// `epoch`-th incarnation: "<group>/nccl/e<epoch>/". A communicator re-created after a failure takes the next epoch,
/// so it never reads the unique id of the aborted one (rendezvous_store keys are written once per group name).
std::string device_group_key(std::string_view group, uint64_t epoch);

/// The unique id of the communicator under `key_prefix` (from device_group_key): rank 0 calls `make_id` and
/// publishes the bytes under key_prefix + "unique_id"; every other rank waits up to `timeout` for them. Returns the
/// same bytes on every rank. Throws comm_error naming the group and the rank when the id does not arrive, or when
/// make_id returns nothing.
std::vector<char> exchange_unique_id(rendezvous_store& store, std::string_view key_prefix, int rank,
                                     const std::function<std::vector<char>()>& make_id,
                                     std::chrono::milliseconds timeout);

/// What one rank says about its device before a device communicator is chosen.
struct rank_device {
  /// The physical device, the same string in every process that uses it: "<host>/<PCI bus id>" for a GPU
  /// (CUDA_VISIBLE_DEVICES renumbers devices, the bus id does not); empty for a rank that is not on a GPU.
  std::string identity;
  bool nccl = false;  ///< this rank's binary was built with NCCL
};

/// Every rank publishes `mine` under key_prefix + "device/<rank>" and reads the others'; returns all `size` of them
/// in rank order (the same vector on every rank). Throws comm_error naming the missing rank after `timeout`.
std::vector<rank_device> exchange_rank_devices(rendezvous_store& store, std::string_view key_prefix, int rank, int size,
                                               const rank_device& mine, std::chrono::milliseconds timeout);

}  // namespace actorllm::comm
