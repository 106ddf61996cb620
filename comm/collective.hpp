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

/// What all_to_all_rows moved between this rank and the others since the communicator was made: the rows of expert
/// parallelism's dispatch and combine. Rows a rank addresses to itself are a local copy and not counted. Bytes are
/// what crossed between ranks for those calls: the rows, the padding the all-gather form adds, and the row counts
/// (a real all-to-all tells each peer one 8-byte count; an all-gather form gathers all size() counts, 4 bytes each,
/// to every peer).
struct exchange_stats {
  uint64_t exchanges = 0;       ///< all_to_all_rows calls
  uint64_t rows_sent = 0;       ///< rows sent to other ranks
  uint64_t rows_received = 0;   ///< rows received from other ranks
  uint64_t bytes_sent = 0;      ///< bytes this rank contributed that other ranks received (rows, padding, counts)
  uint64_t bytes_received = 0;  ///< bytes this rank received from other ranks (rows, padding, counts)
};

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
  /// it with the same width; `recv` must not hold `send`. Every transport overrides it with a real all-to-all that
  /// moves each rank's rows only to the rank they are addressed to; the default is all_to_all_rows_via_all_gather.
  virtual std::vector<int64_t> all_to_all_rows(const float* send, std::span<const int64_t> send_rows, int64_t width,
                                               std::vector<float>& recv);
  /// all_to_all_rows built on all_gather: the counts are all-gathered, then every rank's rows, padded to the largest
  /// send, so every rank receives every rank's buffer (size() x the largest). Exact on every communicator; kept
  /// callable by name so a bench or a test can set it against the real all-to-all on the same group.
  std::vector<int64_t> all_to_all_rows_via_all_gather(const float* send, std::span<const int64_t> send_rows,
                                                      int64_t width, std::vector<float>& recv);
  /// What all_to_all_rows (either form) moved so far. A wrapper answers its inner communicator's.
  virtual exchange_stats exchange_statistics() const { return exchange_stats_; }

 protected:
  /// Counts one all_to_all_rows call of a real all-to-all: `sent_rows` / `received_rows` to and from other ranks,
  /// one 8-byte count told to and heard from each peer.
  void count_all_to_all(int64_t sent_rows, int64_t received_rows, int64_t width);
  /// Checks the arguments of an all_to_all_rows call (one count per rank, none negative, rows of some width) and
  /// returns how many rows this rank sends.
  int64_t rows_to_send(std::span<const int64_t> send_rows, int64_t width) const;
  /// all_to_all_rows in a group of one rank: its rows come back to it, and nothing crosses a transport.
  std::vector<int64_t> all_to_all_alone(const float* send, int64_t n_send, int64_t width, std::vector<float>& recv);

  exchange_stats exchange_stats_;
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
