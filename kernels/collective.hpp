// The data-plane collectives a tensor-parallel group needs, behind one small interface. Implementations: a single
// rank (no-op), threads of one process sharing memory, Gloo between processes, NCCL between GPUs.
#pragma once

#include <cstdint>
#include <cstring>

namespace actorllm {

/// Collective operations over the ranks of one tensor-parallel group. Every rank calls each operation in the same
/// order with the same sizes (the usual collective contract).
class tp_collective {
 public:
  virtual ~tp_collective() = default;
  /// This rank's index in the group.
  virtual int rank() const = 0;
  /// Number of ranks in the group.
  virtual int size() const = 0;
  /// data[i] = sum over ranks of data[i], in place.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  /// out = concatenation over ranks (rank order) of each rank's `in` (n_per_rank floats each).
  virtual void all_gather(const float* in, int64_t n_per_rank, float* out) = 0;
};

/// The group of one: every collective is the identity.
class single_rank_collective final : public tp_collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_gather(const float* in, int64_t n_per_rank, float* out) override {
    if (in != out)
      std::memmove(out, in, static_cast<size_t>(n_per_rank) * sizeof(float));
  }
};

}  // namespace actorllm
