// Which transport a group's collectives take, decided in one place (vLLM's cuda_communicator chooses the same way):
// - a GPU tensor-parallel group: NCCL when every rank is on a GPU of its own and every rank's build has NCCL; else the
//   host-staged collective over the CPU transports. NCCL refuses two ranks on one GPU ("Duplicate GPU detected"),
//   which is how the one-GPU test layouts run. Every rank decides from the same list (comm::exchange_rank_devices), so
//   they all pick the same transport (ACTORLLM_NCCL: auto, 1, 0).
// - a host group: shared memory when its ranks share a host, Gloo (TCP) otherwise (ACTORLLM_SHM_COLLECTIVE=0: Gloo
//   always).
// - one all-reduce of device tensors: the custom all-reduce over CUDA-IPC-mapped buffers (one-shot or two-shot) for
//   small messages between the devices of one node, NCCL for the rest, host-staged where NCCL cannot run. Plain
//   arithmetic, unit-tested without a GPU; the thresholds are vLLM's (csrc/custom_all_reduce.cuh and
//   vllm/distributed/device_communicators/custom_all_reduce.py), with our deviations named next to each.
// comm/group_transports builds what this names.
#pragma once

#include "comm/device_rendezvous.hpp"
#include "kernels/dtype.hpp"

#include <cstddef>
#include <cstdint>
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

/// False when ACTORLLM_SHM_COLLECTIVE is 0, off or false: host collectives then take Gloo even within one host.
bool shm_collective_allowed();

}  // namespace actorllm::comm

namespace actorllm {

/// The implementations an all-reduce of device tensors can take.
enum class all_reduce_path : uint8_t {
  identity,         ///< a group of one: nothing to do
  custom_one_shot,  ///< every rank reads every rank's buffer and sums all of it (one barrier pair, n-fold reads)
  custom_two_shot,  ///< reduce-scatter of 1/n per rank, then all-gather (an extra barrier, 2/n of the traffic)
  nccl,             ///< the NCCL communicator (ranks on distinct devices)
  host_staged,      ///< download, the host collective, upload (ranks sharing a device: NCCL refuses them)
};

/// "identity", "custom one-shot", "custom two-shot", "nccl", "host-staged".
const char* to_string(all_reduce_path p);

/// What the group looks like; the same on every rank (each rank must take the same path for the same message).
struct all_reduce_topology {
  int world_size = 1;
  /// Every rank runs on this host (CUDA IPC maps memory of one node only).
  bool single_node = true;
  /// Every pair of ranks can map each other's memory: cudaDeviceCanAccessPeer both ways, or both on one device.
  bool all_pairs_ipc = false;
  /// Every pair is joined by NVLink (or shares a device). Over PCIe only two ranks take the custom path (vLLM: the
  /// all-to-all reads of more ranks contend on the PCIe switch and lose to NCCL's ring).
  bool fully_connected = false;
  /// Some ranks share a device (several processes on one GPU): NCCL refuses that group ("Duplicate GPU detected").
  bool shared_device = false;
};

/// The thresholds, vLLM's defaults.
struct all_reduce_limits {
  /// Largest message (bytes, exclusive) the custom path takes: vLLM's max_size of 8 MiB. Above it NCCL's ring
  /// (bandwidth-bound, 2(n-1)/n of the bytes per rank) beats the custom kernels.
  size_t custom_max_bytes = size_t{8} << 20;
  /// One-shot below this many bytes with at most 4 ranks (vLLM: 512 KiB), ...
  size_t one_shot_max_bytes_4 = size_t{512} << 10;
  /// ... and below this with 5 to 8 ranks (vLLM: 256 KiB): one-shot reads n times the message per rank, so the
  /// crossover to two-shot comes sooner with more ranks. Two ranks always take one-shot (vLLM too): two-shot would
  /// add a barrier to save reading half a message.
  size_t one_shot_max_bytes_8 = size_t{256} << 10;
  /// The most ranks the custom kernels serve (vLLM: 8, the size of an NVLink node; our signal layout holds 8).
  int custom_max_ranks = 8;
  /// Ranks sharing one device take the custom path only when asked: without MPS the processes' kernels are
  /// time-sliced, so the spin barriers progress at the scheduler's pace (milliseconds). Correctness tests ask.
  bool custom_on_shared_device = false;
};

/// One message.
struct all_reduce_message {
  dtype type = dtype::f32;
  size_t bytes = 0;
  /// Address of the tensor's data (only its alignment matters).
  uintptr_t address = 0;
  /// Bytes of this rank's registered IPC buffer: a message larger than it cannot be staged there.
  size_t staging_capacity = 0;
};

/// The custom kernels' load width: a message must start on this boundary (vLLM requires it of the size too; our
/// kernels take the tail that does not fill a 16-byte pack element by element, so any size is served).
inline constexpr size_t custom_all_reduce_alignment = 16;

/// Why the custom path is not taken for this message (empty when it is, or when the group has no custom path
/// because world_size is 1). For logs and tests: the rule in words.
std::string custom_all_reduce_refusal(const all_reduce_topology& group, const all_reduce_message& msg,
                                      const all_reduce_limits& limits = {});

/// The path for `msg` in `group`: identity for one rank; the custom kernel when custom_all_reduce_refusal is empty
/// (one-shot or two-shot by size and world); else host-staged when ranks share a device (NCCL refuses them), NCCL
/// otherwise (the interface point of kernels/cuda/nccl_*: the caller builds whichever collective this names).
all_reduce_path choose_all_reduce(const all_reduce_topology& group, const all_reduce_message& msg,
                                  const all_reduce_limits& limits = {});

/// One-shot or two-shot for a message the custom path takes: two ranks always one-shot; up to 4 ranks one-shot below
/// one_shot_max_bytes_4; up to 8 ranks below one_shot_max_bytes_8; two-shot above.
all_reduce_path custom_all_reduce_shot(int world_size, size_t bytes, const all_reduce_limits& limits = {});

}  // namespace actorllm
