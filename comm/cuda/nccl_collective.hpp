// The TP collectives between GPUs over NCCL: a tp_collective whose tensor forms queue ncclAllReduce / ncclAllGather on
// the backend's stream over device tensors (f32, f16, bf16), whose host primitives are staged through device
// buffers, whose all-to-all is grouped ncclSend/ncclRecv, plus point-to-point send/recv of device tensors. Built only
// when NCCL is found (ACTORLLM_HAVE_NCCL).
//
// The communicator is nonblocking (ncclConfig_t::blocking = 0), so that neither its creation nor a collective can
// hold this thread inside NCCL: every call returns at once and is polled. A watchdog thread follows the queued
// operations (a CUDA event after each) and the communicator's asynchronous error; on an error, an operation older
// than the timeout, or abort() from any thread, it calls ncclCommAbort, which ends the kernels still spinning on a
// dead peer, so that the owner's stream synchronisation returns and raise_if_broken() throws comm_error. None of
// this has run on a GPU yet: written against the NCCL 2.28 headers, compiled, and tested only in its host logic
// (comm/collective_watchdog.hpp) until tests/kernels/cuda/nccl_collective_gpu_test.cpp runs on a machine with 2 GPUs.
#pragma once

#include "comm/collective.hpp"
#include "comm/device_peer_link.hpp"
#include "kernels/cuda/cuda_backend.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace actorllm::cuda {

/// How an nccl_collective names itself and how long it waits.
struct nccl_options {
  /// The group's name in messages and in NCCL's own logs (commName), e.g. "<replica>/tp/0".
  std::string group = "nccl";
  /// Bound on every operation, counted from when it is the oldest one queued.
  std::chrono::milliseconds timeout{30'000};
  /// Bound on the creation (every rank joining, NCCL's topology detection); 0: the same as `timeout`.
  std::chrono::milliseconds init_timeout{0};
  /// How often the watchdog looks while operations are queued.
  std::chrono::microseconds poll_interval{500};
};

/// One rank's NCCL communicator. One thread drives it (the shard's); abort() and the returned abort handle may be
/// called from any thread. Every failure throws comm::comm_error naming the group, the rank and the call; after one,
/// every later operation throws too.
class nccl_collective final : public tp_collective, public device_peer_link {
 public:
  using tp_collective::all_gather;
  using tp_collective::all_reduce_sum;

  /// A fresh unique id (ncclGetUniqueId, 128 bytes), made by rank 0 and handed to every rank over the control plane.
  static std::vector<char> new_unique_id();
  /// NCCL's version as "2.28.9" (the library loaded at run time).
  static std::string library_version();
  /// The version of the nccl.h this was compiled against.
  static std::string header_version();

  /// Joins the communicator `unique_id` names as `rank` of `size`, on `be`'s GPU and stream (`be` must outlive it).
  /// Blocks until every rank has joined, or throws comm_error after the timeout (the half-made communicator is
  /// aborted).
  nccl_collective(std::span<const char> unique_id, int rank, int size, cuda_backend& be, nccl_options options = {});
  /// Finalizes and destroys the communicator, or aborts it when that fails or takes longer than the timeout.
  ~nccl_collective() override;
  nccl_collective(const nccl_collective&) = delete;
  nccl_collective& operator=(const nccl_collective&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool takes_device_tensors() const override { return true; }

  /// In place over a tensor on this GPU (f32, f16 or bf16); queued on the stream, returns before it runs.
  void all_reduce_sum(const tensor& t) override;
  /// Rank-ordered concatenation into `out` (same dtype, size() × in.numel() elements); queued, returns at once.
  void all_gather(const tensor& in, const tensor& out) override;
  /// Host memory: uploaded to a device buffer, reduced, downloaded; returns when the result is in `data`.
  void all_reduce_sum(float* data, int64_t n) override;
  /// Host memory, as all_reduce_sum above.
  void all_gather(const float* in, int64_t n_per_rank, float* out) override;
  /// The rows move as grouped ncclSend/ncclRecv between device buffers (the counts first, by an all-gather).
  std::vector<int64_t> all_to_all_rows(const float* send, std::span<const int64_t> send_rows, int64_t width,
                                       std::vector<float>& recv) override;

  /// Queues sending `t` (on this GPU) to `peer`; the peer posts a recv of the same dtype and element count.
  /// Transfers between two ranks match in the order they are queued (NCCL has no tags).
  void send(const tensor& t, int peer) override;
  /// Queues receiving into `t` (on this GPU) what `peer` sends.
  void recv(const tensor& t, int peer) override;

  /// Throws the comm_error that broke the communicator, if one did (see tp_collective::raise_if_broken).
  void raise_if_broken() override;
  /// Aborts the communicator now (ncclCommAbort), from any thread: operations queued or running end, and every
  /// later call throws comm_error with `reason`. A second abort does nothing.
  void abort(const std::string& reason);
  /// abort() as a function that stays safe to call after this communicator is gone (it then does nothing): what the
  /// failure path (comm::abort_registry) holds.
  std::function<void(const std::string&)> abort_handle();

  /// The watchdog's shared state (defined in the .cpp: NCCL's types stay there).
  struct state;

 private:
  tensor staging(tensor& slot, int64_t n_floats);

  int rank_;
  int size_;
  cuda_backend& be_;
  std::shared_ptr<state> state_;
  tensor stage_in_, stage_out_;  // device staging of the host primitives, grown as needed
};

}  // namespace actorllm::cuda
