// The NCCL half of `actorllm check` on GPU clusters: over one NCCL communicator of every rank, an all-reduce whose
// result each rank verifies (latency of a small one, bus bandwidth of a large one), then for every pair of ranks a
// ping-pong (latency) and a one-way bulk transfer (bandwidth) with ncclSend/ncclRecv: the figures
// comm/check/comm_check.hpp measures over Gloo, in the same shape. Declared for every build; without NCCL it says so in
// the report's error. The custom IPC all-reduce is measured next to it (comm/check/custom_all_reduce_check.hpp).
#pragma once

#include "comm/check/link_figures.hpp"
#include "kernels/backend.hpp"

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace actorllm {

/// What to measure.
struct nccl_check_options {
  int64_t small_floats = 1024;     ///< 4 KiB: latency
  int64_t large_floats = 4 << 20;  ///< 16 MiB: bandwidth
  int32_t iterations = 5;          ///< timed repetitions after one untimed warm-up (the best is reported)
};

/// One pair's figures (comm/check/link_figures.hpp), as Gloo's check reports them too.
using nccl_pair_figures = pair_figures;

/// What one rank measured.
struct nccl_check_report {
  bool all_reduce_ok = false;
  double all_reduce_latency_us = 0;      ///< best small all-reduce, queued and synchronised
  double all_reduce_bus_gbs = 0;         ///< best large all-reduce as NCCL-tests' bus bandwidth: 2(n-1)/n × bytes/time
  std::vector<nccl_pair_figures> pairs;  ///< with every higher rank
  std::string error;                     ///< set when the communicator failed, or without NCCL
};

/// Runs the check as `rank` of `world` in the NCCL communicator `unique_id` names, on `be` (a CUDA backend). Every
/// rank calls it with the same options. Never throws: failures end up in the report.
nccl_check_report run_nccl_check(std::span<const char> unique_id, int rank, int world, backend& be,
                                 const std::string& group, std::chrono::milliseconds timeout,
                                 const nccl_check_options& options);

}  // namespace actorllm
