// The data plane between the TP shards of one process.
#include "comm/shared_memory_collective.hpp"

#include "util/check.hpp"

#include <algorithm>
#include <cstring>

namespace actorllm::comm {

shared_memory_group::shared_memory_group(int size)
    : size_(size), sync_(size), inputs_(static_cast<size_t>(size), nullptr) {
  ACTORLLM_CHECK(size >= 1, "a TP group needs at least one rank");
}

shared_memory_collective::shared_memory_collective(std::shared_ptr<shared_memory_group> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  ACTORLLM_CHECK(rank_ >= 0 && rank_ < group_->size_, "rank outside its TP group");
}

void shared_memory_collective::all_reduce_sum(float* data, int64_t n) {
  auto& g = *group_;
  if (g.size_ == 1)
    return;
  auto& scratch = g.scratch_[op_++ & 1];
  g.inputs_[static_cast<size_t>(rank_)] = data;
  // Rank 0 sizes the scratch before anyone writes it: the first barrier orders that resize before every write.
  if (rank_ == 0 && static_cast<int64_t>(scratch.size()) < n)
    scratch.resize(static_cast<size_t>(n));
  g.sync_.arrive_and_wait();
  // Reduce-scatter: this rank sums its chunk over all ranks, in rank order.
  const int64_t chunk = (n + g.size_ - 1) / g.size_;
  const int64_t begin = std::min(n, chunk * rank_);
  const int64_t end = std::min(n, begin + chunk);
  float* out = scratch.data();
  for (int64_t i = begin; i < end; ++i)
    out[i] = g.inputs_[0][i];
  for (int r = 1; r < g.size_; ++r) {
    const float* in = g.inputs_[static_cast<size_t>(r)];
    for (int64_t i = begin; i < end; ++i)
      out[i] += in[i];
  }
  g.sync_.arrive_and_wait();
  // All-gather: everyone copies the reduced vector back (every rank has finished reading the inputs).
  std::memcpy(data, out, static_cast<size_t>(n) * sizeof(float));
}

void shared_memory_collective::all_gather(const float* in, int64_t n_per_rank, float* out) {
  auto& g = *group_;
  if (g.size_ == 1) {
    if (in != out)
      std::memmove(out, in, static_cast<size_t>(n_per_rank) * sizeof(float));
    return;
  }
  ++op_;
  g.inputs_[static_cast<size_t>(rank_)] = in;
  g.sync_.arrive_and_wait();
  for (int r = 0; r < g.size_; ++r)
    std::memcpy(out + r * n_per_rank, g.inputs_[static_cast<size_t>(r)],
                static_cast<size_t>(n_per_rank) * sizeof(float));
  // Inputs stay valid until every rank has copied them.
  g.sync_.arrive_and_wait();
}

}  // namespace actorllm::comm
