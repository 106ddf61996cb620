// The custom all-reduce of a tensor-parallel group on the GPUs of one node: small messages go through this rank's
// CUDA-IPC-registered staging buffer and the one-shot / two-shot kernels (comm/cuda/custom_all_reduce_kernels),
// everything else to a fallback collective (NCCL for ranks on distinct devices, host-staged for ranks sharing one),
// as comm/transport_choice decides per message. Every rank gets identical bits: the sum runs in rank order.
//
// Setting a group up (one process per rank):
//   custom_all_reduce_memory mem(device, 8 << 20);             // this rank's staging and signal buffers
//   cuda_ipc_backend ipc(device);
//   auto peers = comm::ipc_handshake(store, ipc, {group, epoch, rank, world, mem.data(), mem.data_bytes(),
//                                                  mem.signal(), mem.signal_bytes()});
//   const auto topology = ipc_group_topology(*peers, nvlink);
//   custom_all_reduce car(std::move(peers), std::move(fallback), topology, stream);
// `mem` must outlive `car` and every peer's use of it (tear the group down together).
#pragma once

#include "comm/collective.hpp"
#include "comm/cuda/custom_all_reduce_kernels.hpp"
#include "comm/ipc_memory.hpp"
#include "comm/transport_choice.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace actorllm::cuda {

/// This rank's two allocations for the custom all-reduce, each a whole cudaMalloc (IPC exports whole allocations):
/// the staging buffer messages are copied into, and the signal buffer of the barriers, zeroed.
class custom_all_reduce_memory {
 public:
  /// On visible device `device_index`; `data_bytes` bounds the largest message the custom path takes.
  custom_all_reduce_memory(int device_index, size_t data_bytes);
  ~custom_all_reduce_memory();
  custom_all_reduce_memory(const custom_all_reduce_memory&) = delete;
  custom_all_reduce_memory& operator=(const custom_all_reduce_memory&) = delete;

  void* data() const { return data_; }
  size_t data_bytes() const { return data_bytes_; }
  void* signal() const { return signal_; }
  static constexpr size_t signal_bytes() { return sizeof(car::signal_layout); }

 private:
  int device_;
  void* data_ = nullptr;
  size_t data_bytes_;
  void* signal_ = nullptr;
};

/// The topology of a group whose IPC handshake succeeded: one node, every pair mapped; fully connected when the
/// caller knows every pair of devices is joined by NVLink (NVML's business, not asked here) or all ranks share one
/// device.
all_reduce_topology ipc_group_topology(const ipc_peer_buffers& buffers, bool nvlink_all_pairs);

/// One rank of the group (see the file comment for the setup).
class custom_all_reduce final : public tp_collective {
 public:
  /// `buffers` from comm::ipc_handshake; `fallback` serves every message the rule does not give the custom path,
  /// and the host primitives; `stream` is the stream the tensors' producers and consumers run on (the backend's).
  custom_all_reduce(std::unique_ptr<ipc_peer_buffers> buffers, std::unique_ptr<tp_collective> fallback,
                    all_reduce_topology topology, cudaStream_t stream, all_reduce_limits limits = {});
  ~custom_all_reduce() override;
  custom_all_reduce(const custom_all_reduce&) = delete;
  custom_all_reduce& operator=(const custom_all_reduce&) = delete;

  using tp_collective::all_gather;
  using tp_collective::all_reduce_sum;
  int rank() const override { return buffers_->rank(); }
  int size() const override { return buffers_->size(); }
  /// Device tensors as they are (the custom kernels, or the fallback, which serves them: NCCL or host-staged).
  bool takes_device_tensors() const override { return true; }
  /// A failure of the fallback (an aborted NCCL communicator) surfaces here after the step's synchronisation.
  void raise_if_broken() override { fallback_->raise_if_broken(); }

  /// t = sum over ranks of t, in place: device f32 and bf16 tensors by the rule's path; host tensors and every
  /// other message through the fallback. The rule looks at t's address (16-byte alignment), so every rank must
  /// pass tensors allocated alike (aligned on all ranks or on none, as the same allocations from the caching pool
  /// are): ranks that chose differently would wait for each other in different collectives.
  void all_reduce_sum(const tensor& t) override;
  void all_gather(const tensor& in, const tensor& out) override { fallback_->all_gather(in, out); }
  void all_reduce_sum(float* data, int64_t n) override { fallback_->all_reduce_sum(data, n); }
  void all_gather(const float* in, int64_t n_per_rank, float* out) override {
    fallback_->all_gather(in, n_per_rank, out);
  }
  std::vector<int64_t> all_to_all_rows(const float* send, std::span<const int64_t> send_rows, int64_t width,
                                       std::vector<float>& recv) override {
    return fallback_->all_to_all_rows(send, send_rows, width, recv);
  }
  exchange_stats exchange_statistics() const override { return fallback_->exchange_statistics(); }

  /// The path the rule picks for a device message of `bytes` of `type` at `data`.
  all_reduce_path choose(dtype type, size_t bytes, const void* data) const;

  /// Sums the n elements at device address `data` in place over the group by `path` (custom_one_shot or
  /// custom_two_shot): copies them into the staging buffer and launches the kernel, both on the stream, so `data`
  /// must be written in the stream's order (a copy on the legacy default stream is not, with a non-blocking stream).
  /// Every rank calls it with the same n, type and path. For the tensor form and the GPU tests (which force each path).
  void all_reduce_device(void* data, int64_t n, element_type type, all_reduce_path path);

  /// The path the last all_reduce_sum(tensor) took: a custom one, or the path the rule named for the fallback
  /// (host_staged for a host tensor).
  all_reduce_path last_path() const { return last_path_; }

 private:
  std::unique_ptr<ipc_peer_buffers> buffers_;
  std::unique_ptr<tp_collective> fallback_;
  all_reduce_topology topology_;
  cudaStream_t stream_;
  all_reduce_limits limits_;
  car_rank_table* device_table_ = nullptr;  // uploaded on the first custom call (no CUDA call before that)
  all_reduce_path last_path_ = all_reduce_path::identity;
};

}  // namespace actorllm::cuda
