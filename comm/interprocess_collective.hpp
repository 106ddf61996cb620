// The data plane between the TP shards of one host that live in different processes (the mp executor, or the
// workers a node agent starts): a POSIX shared-memory segment that every rank maps, so an all-reduce is a copy in,
// one arrival barrier and a rank-order sum, with no sockets, no I/O thread and no sleeping wake-up in between; an
// all-to-all is a copy in and each rank's copy out of the rows addressed to it.
//
// Why not Gloo here: Gloo's TCP pairs hand every receive from its I/O thread to the waiting thread, and a rank
// that sleeps while its peer computes pays a wake-up per collective; a decode step does two all-reduces per layer,
// which measured about 1 ms each with Gloo on loopback against tens of microseconds here (bench_executors).
// Gloo stays for ranks on different hosts and for pipeline activations.
#pragma once

#include "comm/collective.hpp"
#include "comm/rendezvous_store.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace actorllm::comm {

struct interprocess_options {
  /// Bound on the rendezvous and on every wait for a peer. A peer process that exits is noticed at once
  /// (its pid is checked while waiting); one that hangs fails the others after this long.
  std::chrono::milliseconds timeout{30'000};
  /// Floats per rank per exchange; larger collectives go in pieces of this size.
  int64_t capacity_floats = int64_t{1} << 18;
};

/// One rank's handle on a TP group whose ranks share a segment. Sums are in rank order, so every rank holds
/// bit-identical results, equal to shared_memory_collective's. Each rank uses its handle from one thread.
class interprocess_collective final : public tp_collective {
 public:
  /// Sets up group `name` through `store` (keys under "<name>/"): rank 0 creates a segment, every other rank maps
  /// it, and all agree whether every rank could. Returns nullptr on every rank alike when some rank could not
  /// (another host, another pid namespace, no /dev/shm): the caller then takes a transport that crosses hosts.
  /// Throws comm_error when a rank does not take part within the timeout.
  static std::unique_ptr<interprocess_collective> try_create(rendezvous_store& store, const std::string& name, int rank,
                                                             int size, interprocess_options options = {});
  ~interprocess_collective() override;
  interprocess_collective(const interprocess_collective&) = delete;
  interprocess_collective& operator=(const interprocess_collective&) = delete;

  using tp_collective::all_gather;  // the tensor forms
  using tp_collective::all_reduce_sum;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, int64_t n) override;
  void all_gather(const float* in, int64_t n_per_rank, float* out) override;
  /// A real all-to-all: each rank writes its row counts and rows (in pieces when larger than a slot) into its own
  /// slot, and every rank copies out only the run addressed to it. Needs a slot of at least 2 x size() floats (the
  /// counts).
  std::vector<int64_t> all_to_all_rows(const float* send, std::span<const int64_t> send_rows, int64_t width,
                                       std::vector<float>& recv) override;

  /// The layout of the mapped segment (defined in the .cpp).
  struct segment;

 private:
  interprocess_collective(std::string name, int rank, int size, interprocess_options options, segment* mapped,
                          size_t mapped_bytes);
  float* slot(uint64_t op, int r) const;
  /// Publishes this rank's arrival at exchange `op_` and waits until every rank has arrived.
  void exchange(const char* what);
  [[noreturn]] void fail(const std::string& what);
  /// Throws at once when an earlier failure broke the group.
  void throw_if_broken() const;
  /// Fails this rank when some rank gave up on the group (it published its arrival, but no contribution).
  void fail_if_one_gave_up(const char* what);

  std::string name_;
  int rank_;
  int size_;
  interprocess_options options_;
  segment* segment_;
  size_t mapped_bytes_;
  uint64_t op_ = 0;     // exchanges done so far; selects the slot parity
  std::string broken_;  // set by the first failure: later calls fail at once with it
  /// Until when a wait polls only briefly: set when a poll saw this rank taken off its core (the cores are shared).
  std::chrono::steady_clock::time_point poll_briefly_until_{};
};

}  // namespace actorllm::comm
