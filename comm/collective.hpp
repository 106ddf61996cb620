// The data-plane collectives a tensor-parallel group needs, behind one small interface. Implementations: a single
// rank (no-op), threads of one process sharing memory, processes of one host over shared memory, Gloo between
// hosts; NCCL between GPUs (comm/cuda/nccl_collective.hpp).
#pragma once

#include "kernels/tensor.hpp"

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace actorllm {

/// Collective operations over the ranks of one tensor-parallel group. Every rank calls each operation in the same
/// order with the same sizes (the usual collective contract).
///
/// The model calls the tensor forms. Their default implementation serves tensors in host memory through the
/// host primitives below (what every implementation today provides); a device communicator (NCCL) overrides the
/// tensor forms and keeps the data on its device.
class tp_collective {
 public:
  virtual ~tp_collective() = default;
  /// This rank's index in the group.
  virtual int rank() const = 0;
  /// Number of ranks in the group.
  virtual int size() const = 0;

  /// t[i] = sum over ranks of t[i], in place (f32).
  virtual void all_reduce_sum(const tensor& t);
  /// out = concatenation over ranks (rank order) of each rank's `in` (f32; out holds size() * in.numel()).
  virtual void all_gather(const tensor& in, const tensor& out);

  /// Whether the tensor forms take tensors on the backend's device as they are (a device communicator: NCCL). A GPU
  /// shard wraps a communicator that answers false in host_staged_collective.
  virtual bool takes_device_tensors() const { return false; }
  /// Throws the error that broke the group, if one did. A device communicator returns before its collectives run
  /// and learns of a failure (a peer gone, a timeout) later, from its watchdog: the shard calls this after each step's
  /// device work has finished, so a step whose collective was aborted reports the failure instead of its garbage.
  virtual void raise_if_broken() {}

  /// Host primitive: data[i] = sum over ranks of data[i], in place.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  /// Host primitive: out = concatenation over ranks (rank order) of each rank's `in` (n_per_rank floats each).
  virtual void all_gather(const float* in, int64_t n_per_rank, float* out) = 0;

  /// Host primitive: the all-to-all of rows of `width` floats that expert parallelism dispatches tokens with and
  /// combines their outputs with. This rank sends send_rows[d] rows to rank d (size() entries; the rows lie back to
  /// back in `send`, in destination order) and receives into `recv` (resized) the rows every rank sent it, in source
  /// rank order; returns how many rows came from each source. Counts may differ from rank to rank; every rank calls
  /// it with the same width. The default is built on all_gather (each rank sees every buffer, padded to the
  /// largest): exact for every host communicator, and cheap for the few ranks of one host; a device communicator
  /// (NCCL) overrides it with a real all-to-all.
  virtual std::vector<int64_t> all_to_all_rows(const float* send, std::span<const int64_t> send_rows, int64_t width,
                                               std::vector<float>& recv);
};

/// The group of one: every collective is the identity.
class single_rank_collective final : public tp_collective {
 public:
  using tp_collective::all_gather;
  using tp_collective::all_reduce_sum;
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(const tensor&) override {}
  void all_reduce_sum(float*, int64_t) override {}
  void all_gather(const float* in, int64_t n_per_rank, float* out) override {
    if (in != out)
      std::memmove(out, in, static_cast<size_t>(n_per_rank) * sizeof(float));
  }
};

}  // namespace actorllm
