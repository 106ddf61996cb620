// Which transport a GPU tensor-parallel group's collectives take: NCCL when every rank is on a GPU of its own and
// every rank's build has NCCL; else the host-staged collective over the CPU transports (shared memory, Gloo). NCCL
// refuses two ranks on one GPU ("Duplicate GPU detected"), which is how the one-GPU test layouts run. Every rank
// decides from the same list (comm::exchange_rank_devices), so they all pick the same transport.
#pragma once

#include "comm/device_rendezvous.hpp"

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace actorllm::comm {

/// The transports of a GPU group's tensor collectives.
enum class device_transport { host_staged, nccl };

/// What the ACTORLLM_NCCL environment variable asks for.
enum class nccl_mode {
  automatic,  ///< unset or "auto": NCCL where it is possible, host-staged otherwise
  required,   ///< "1": NCCL or an error saying why it is impossible
  off,        ///< "0": host-staged always
};

/// ACTORLLM_NCCL's value (null: unset). nullopt for a value that is none of "auto", "1", "0".
std::optional<nccl_mode> parse_nccl_mode(const char* value);

/// The decision and why, for the log.
struct device_transport_choice {
  device_transport transport = device_transport::host_staged;
  std::string reason;  ///< why this transport, naming the ranks and devices that decided it
  std::string error;   ///< non-empty when NCCL was required and is impossible (the transport is then unusable)
};

/// The choice for a group whose ranks run on `ranks` (in rank order), under `mode`.
device_transport_choice choose_device_transport(std::span<const rank_device> ranks, nccl_mode mode);

}  // namespace actorllm::comm
