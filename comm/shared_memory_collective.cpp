// The data plane between the TP shards of one process.
#include "comm/shared_memory_collective.hpp"

#include "comm/comm_error.hpp"
#include "util/check.hpp"
#include "util/cpu_count.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace actorllm::comm {

abortable_barrier::abortable_barrier(int size, std::string name) : size_(size), name_(std::move(name)) {
  ACTORLLM_CHECK(size >= 1, "a barrier needs at least one rank");
}

void abortable_barrier::arrive_and_wait(bool abortable) {
  std::unique_lock lock{mutex_};
  if (abortable && !abort_reason_.empty())
    throw comm_error(fmt::format("{} was aborted: {}", name_, abort_reason_));
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || (abortable && !abort_reason_.empty()); });
  if (generation_ == generation)
    throw comm_error(fmt::format("{} was aborted: {}", name_, abort_reason_));
}

void abortable_barrier::abort(const std::string& why) {
  {
    std::lock_guard lock{mutex_};
    if (abort_reason_.empty())
      abort_reason_ = why.empty() ? "aborted" : why;
  }
  cv_.notify_all();
}

bool abortable_barrier::aborted() const {
  std::lock_guard lock{mutex_};
  return !abort_reason_.empty();
}

shared_memory_group::shared_memory_group(int size)
    : size_(size), inputs_(static_cast<size_t>(size), nullptr), row_counts_(static_cast<size_t>(size), nullptr) {
  ACTORLLM_CHECK(size >= 1, "a TP group needs at least one rank");
  sync_.emplace(size, size <= usable_cpu_count() ? spin_barrier::default_spin : std::chrono::nanoseconds{0});
  for (auto& slots : slots_)
    slots.resize(static_cast<size_t>(size));
}

shared_memory_group::shared_memory_group(int size, std::string name)
    : size_(size), inputs_(static_cast<size_t>(size), nullptr), row_counts_(static_cast<size_t>(size), nullptr) {
  ACTORLLM_CHECK(size >= 1, "a group needs at least one rank");
  abortable_.emplace(size, std::move(name));
  for (auto& slots : slots_)
    slots.resize(static_cast<size_t>(size));
}

void shared_memory_group::abort(const std::string& why) {
  ACTORLLM_CHECK(abortable_.has_value(), "a TP group cannot be aborted: its ranks live and die together");
  abortable_->abort(why);
}

void shared_memory_group::wait() {
  if (abortable_)
    abortable_->arrive_and_wait();
  else
    sync_->arrive_and_wait();
}

void shared_memory_group::wait_closing() {
  if (abortable_)
    abortable_->arrive_and_wait(/*abortable=*/false);
  else
    sync_->arrive_and_wait();
}

shared_memory_collective::shared_memory_collective(std::shared_ptr<shared_memory_group> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  ACTORLLM_CHECK(rank_ >= 0 && rank_ < group_->size_, "rank outside its TP group");
}

void shared_memory_collective::all_reduce_sum(float* data, int64_t n) {
  auto& g = *group_;
  if (g.size_ == 1)
    return;
  if (n * g.size_ <= one_barrier_floats) {
    auto& slots = g.slots_[op_++ & 1];
    auto& mine = slots[static_cast<size_t>(rank_)];
    mine.assign(data, data + n);  // this rank's slot: only this rank writes it, before the barrier
    g.wait();
    std::memcpy(data, slots[0].data(), static_cast<size_t>(n) * sizeof(float));
    for (int r = 1; r < g.size_; ++r) {
      const float* in = slots[static_cast<size_t>(r)].data();
      for (int64_t i = 0; i < n; ++i)
        data[i] += in[i];
    }
    return;
  }
  auto& scratch = g.scratch_[op_++ & 1];
  g.inputs_[static_cast<size_t>(rank_)] = data;
  // Rank 0 sizes the scratch before anyone writes it: the first barrier orders that resize before every write.
  if (rank_ == 0 && static_cast<int64_t>(scratch.size()) < n)
    scratch.resize(static_cast<size_t>(n));
  g.wait();
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
  g.wait_closing();
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
  if (n_per_rank * g.size_ <= one_barrier_floats) {
    auto& slots = g.slots_[op_++ & 1];
    slots[static_cast<size_t>(rank_)].assign(in, in + n_per_rank);  // only this rank writes its slot
    g.wait();
    for (int r = 0; r < g.size_; ++r)
      std::memcpy(out + r * n_per_rank, slots[static_cast<size_t>(r)].data(),
                  static_cast<size_t>(n_per_rank) * sizeof(float));
    return;
  }
  ++op_;
  g.inputs_[static_cast<size_t>(rank_)] = in;
  g.wait();
  for (int r = 0; r < g.size_; ++r)
    std::memcpy(out + r * n_per_rank, g.inputs_[static_cast<size_t>(r)],
                static_cast<size_t>(n_per_rank) * sizeof(float));
  // Inputs stay valid until every rank has copied them.
  g.wait_closing();
}

std::vector<int64_t> shared_memory_collective::all_to_all_rows(const float* send, std::span<const int64_t> send_rows,
                                                               int64_t width, std::vector<float>& recv) {
  auto& g = *group_;
  const auto un = static_cast<size_t>(g.size_);
  const auto me = static_cast<size_t>(rank_);
  const int64_t n_send = rows_to_send(send_rows, width);
  if (un == 1)
    return all_to_all_alone(send, n_send, width, recv);
  std::vector<int64_t> from(un, 0);
  g.inputs_[me] = send;
  g.row_counts_[me] = send_rows.data();
  g.wait();
  // Every rank's rows lie in destination order: the run addressed to this rank starts after those to lower ranks.
  int64_t n_recv = 0;
  for (size_t src = 0; src < un; ++src) {
    from[src] = g.row_counts_[src][me];
    n_recv += from[src];
  }
  recv.resize(static_cast<size_t>(n_recv * width));
  float* out = recv.data();
  for (size_t src = 0; src < un; ++src) {
    if (from[src] == 0)
      continue;
    int64_t before = 0;
    for (size_t d = 0; d < me; ++d)
      before += g.row_counts_[src][d];
    const size_t n_floats = static_cast<size_t>(from[src] * width);
    std::memcpy(out, g.inputs_[src] + before * width, n_floats * sizeof(float));
    out += n_floats;
  }
  // Each rank's rows and counts stay valid until every rank has copied its run.
  g.wait_closing();
  count_all_to_all(n_send - send_rows[me], n_recv - from[me], width);
  return from;
}

}  // namespace actorllm::comm
