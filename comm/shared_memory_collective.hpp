// The data plane between ranks that are threads of one process: they share memory, so a small all-reduce is each
// rank summing the others' copies after one barrier, a large one a reduce-scatter and an all-gather over each other's
// buffers, and an all-to-all each rank's copy of the rows addressed to it, with no copies through messages. A TP
// group's ranks live and die together; the expert-parallel group of lockstep replicas
// (actors/executors/lockstep_replicas.hpp) spans replicas that fail apart, so it can be aborted: its ranks blocked in a
// collective wake up and throw.
#pragma once

#include "comm/collective.hpp"
#include "util/spin_barrier.hpp"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::comm {

/// A barrier that can be aborted: every rank waiting in it, and every later arrival, throws comm_error with the
/// reason. A plain class (mutex and condition variable).
class abortable_barrier {
 public:
  abortable_barrier(int size, std::string name);
  /// Waits until all `size` ranks arrived (the barrier then resets), or throws comm_error once it was aborted.
  /// `abortable` false: waits for the others even after an abort, for a barrier that every rank is sure to reach
  /// once it passed the previous one (a collective's closing barrier, which keeps each rank's input alive until
  /// every peer has read it: a rank that threw there would free a buffer a peer is still copying).
  void arrive_and_wait(bool abortable = true);
  /// Wakes every waiting rank with comm_error("<name> was aborted: <why>"); the first reason stays.
  void abort(const std::string& why);
  bool aborted() const;

 private:
  const int size_;
  const std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::string abort_reason_;
};

/// State shared by the ranks of one in-process group. Create one per group, then one shared_memory_collective per
/// rank (each used by exactly one thread).
class shared_memory_group {
 public:
  /// A TP group: its collectives wait on a spin_barrier, whose waiters poll briefly before they sleep where the group
  /// has no more ranks than the process has CPUs (util/cpu_count.hpp), and sleep at once where it has more (a waiter
  /// polling there takes the core a rank that has not arrived needs).
  explicit shared_memory_group(int size);
  /// A group whose ranks may fail apart: its collectives wait on an abortable_barrier (`name` in their errors).
  shared_memory_group(int size, std::string name);
  int size() const { return size_; }
  /// Aborts an abortable group (see abortable_barrier::abort); a TP group cannot be.
  void abort(const std::string& why);
  bool abortable() const { return abortable_.has_value(); }

 private:
  friend class shared_memory_collective;
  /// The opening barrier of a collective: throws once an abortable group was aborted.
  void wait();
  /// The closing barrier: every rank that passed the opening one reaches it, so it waits out an abort (see
  /// abortable_barrier::arrive_and_wait).
  void wait_closing();

  int size_;
  std::optional<spin_barrier> sync_;
  std::optional<abortable_barrier> abortable_;
  std::vector<const float*> inputs_;        // per rank: the buffer it contributes to the current collective
  std::vector<const int64_t*> row_counts_;  // per rank, in an all-to-all: the rows it sends to each rank
  std::vector<float> scratch_[2];           // alternated per collective so a fast rank never overwrites a slow reader
  // Per rank, alternated per collective: a small all-reduce's copy of each rank's input (one barrier, not two). A
  // rank writes its slot of one parity again two collectives later, after the barrier of the one between, which every
  // peer reaches only once it has read this one.
  std::vector<std::vector<float>> slots_[2];
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
  /// Sums in rank order, so every rank holds bit-identical sums, whichever of the two ways it goes: up to
  /// one_barrier_floats floats in all (n x ranks), each rank copies its input into its slot, meets the others once and
  /// sums every slot; above, a reduce-scatter and an all-gather through shared scratch, two barriers. Each barrier is
  /// a rendezvous, and on a machine shared with other work a rank the OS put behind a busy process holds the others
  /// there for up to a time slice.
  void all_reduce_sum(float* data, int64_t n) override;
  static constexpr int64_t one_barrier_floats = int64_t{1} << 18;
  /// Up to one_barrier_floats floats in all, through the ranks' slots with one barrier (as all_reduce_sum); above,
  /// from each rank's input, with a closing barrier that keeps the inputs alive until every rank has copied them.
  void all_gather(const float* in, int64_t n_per_rank, float* out) override;
  /// A real all-to-all: each rank publishes its rows and counts, and copies from each peer's buffer only the run
  /// addressed to it. Throws comm_error when an abortable group is aborted before every rank has arrived.
  std::vector<int64_t> all_to_all_rows(const float* send, std::span<const int64_t> send_rows, int64_t width,
                                       std::vector<float>& recv) override;

 private:
  std::shared_ptr<shared_memory_group> group_;
  int rank_;
  uint64_t op_ = 0;  // collectives done so far, selects the scratch buffer
};

}  // namespace actorllm::comm
