// The TP collectives between processes: tp_collective over a gloo_group (Gloo's ring all-reduce and all-gather
// over TCP, and an all-to-all of rows over its point-to-point buffers). Use it where the shards of a TP group live in
// different processes; shared_memory_collective is the faster choice for threads of one process.
#pragma once

#include "comm/collective.hpp"
#include "comm/gloo_group.hpp"

#include <cstdint>
#include <memory>

namespace actorllm::comm {

/// One rank's tp_collective over a connected gloo_group. Every operation is bounded by the group's timeout: a
/// peer that never calls it (or died) makes this rank throw comm_error after at most that long, never hang.
/// Sums are float sums in an order Gloo picks, so ranks agree to within float rounding, not necessarily bitwise
/// with shared_memory_collective.
class gloo_collective final : public tp_collective {
 public:
  explicit gloo_collective(std::shared_ptr<gloo_group> group);
  using tp_collective::all_gather;  // the tensor forms
  using tp_collective::all_reduce_sum;
  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  /// Throws comm_error on timeout or a lost peer.
  void all_reduce_sum(float* data, int64_t n) override;
  /// Throws comm_error on timeout or a lost peer. `in` may alias this rank's slice of `out`.
  void all_gather(const float* in, int64_t n_per_rank, float* out) override;
  /// A real all-to-all over Gloo's point-to-point buffers: each rank tells each peer its row count, then sends each
  /// peer only the rows addressed to it (nothing when there are none). Throws comm_error on timeout or a lost peer.
  std::vector<int64_t> all_to_all_rows(const float* send, std::span<const int64_t> send_rows, int64_t width,
                                       std::vector<float>& recv) override;

 private:
  std::shared_ptr<gloo_group> group_;
};

}  // namespace actorllm::comm
