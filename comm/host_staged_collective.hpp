// The tensor collectives of a device backend over a transport that moves host memory only (threads, shared memory,
// Gloo): each tensor is downloaded, reduced or gathered on the host by the inner collective, and uploaded back.
// What shards sharing one GPU use (NCCL refuses two ranks on one device; docs/GPU-PLAN.md §5), and what any GPU
// group uses until NCCL is wired. Deterministic: the inner collective's summation order is kept.
#pragma once

#include "comm/collective.hpp"
#include "kernels/backend.hpp"

#include <memory>
#include <vector>

namespace actorllm {

class host_staged_collective final : public tp_collective {
 public:
  /// Wraps `inner` for tensors on `be`'s device; `be` must outlive this.
  host_staged_collective(std::unique_ptr<tp_collective> inner, backend& be);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  /// Device tensors are what it is for (staged through host memory), so a GPU shard does not wrap it again.
  bool takes_device_tensors() const override { return true; }
  void raise_if_broken() override { inner_->raise_if_broken(); }

  void all_reduce_sum(const tensor& t) override;
  void all_gather(const tensor& in, const tensor& out) override;
  void all_reduce_sum(float* data, int64_t n) override { inner_->all_reduce_sum(data, n); }
  void all_gather(const float* in, int64_t n_per_rank, float* out) override { inner_->all_gather(in, n_per_rank, out); }
  /// Host rows already: the inner communicator's own all-to-all.
  std::vector<int64_t> all_to_all_rows(const float* send, std::span<const int64_t> send_rows, int64_t width,
                                       std::vector<float>& recv) override {
    return inner_->all_to_all_rows(send, send_rows, width, recv);
  }
  exchange_stats exchange_statistics() const override { return inner_->exchange_statistics(); }

 private:
  std::unique_ptr<tp_collective> inner_;
  backend& be_;
  std::vector<float> in_, out_;  // host staging, kept between calls
};

}  // namespace actorllm
