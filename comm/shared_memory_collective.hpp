// The data plane between the TP shards of one process: threads that share memory, so an all-reduce is a
// reduce-scatter and an all-gather over each other's buffers, with no copies through messages.
#pragma once

#include "kernels/collective.hpp"

#include <barrier>
#include <cstdint>
#include <memory>
#include <vector>

namespace actorllm::comm {

/// State shared by the ranks of one in-process TP group. Create one per group, then one
/// shared_memory_collective per rank (each used by exactly one thread).
class shared_memory_group {
 public:
  explicit shared_memory_group(int size);
  int size() const { return size_; }

 private:
  friend class shared_memory_collective;
  int size_;
  std::barrier<> sync_;
  std::vector<const float*> inputs_;  // per rank: the buffer it contributes to the current collective
  std::vector<float> scratch_[2];     // alternated per collective so a fast rank never overwrites a slow reader
};

/// One rank's handle on a shared_memory_group. Collectives are deterministic: every rank sums in rank order, so
/// all ranks hold bit-identical results.
class shared_memory_collective final : public tp_collective {
 public:
  shared_memory_collective(std::shared_ptr<shared_memory_group> group, int rank);
  using tp_collective::all_gather;  // the tensor forms
  using tp_collective::all_reduce_sum;
  int rank() const override { return rank_; }
  int size() const override { return group_->size_; }
  void all_reduce_sum(float* data, int64_t n) override;
  void all_gather(const float* in, int64_t n_per_rank, float* out) override;

 private:
  std::shared_ptr<shared_memory_group> group_;
  int rank_;
  uint64_t op_ = 0;  // collectives done so far, selects the scratch buffer
};

}  // namespace actorllm::comm
