// The communication sanity check behind `actorllm check` (like vLLM's troubleshooting script): over one Gloo group
// of every rank, an all-reduce whose result each rank verifies, then a ping-pong and a bulk transfer for every
// pair of ranks, with latency and bandwidth. Every rank calls run_comm_check with the same options.
#pragma once

#include "comm/check/link_figures.hpp"
#include "comm/gloo_group.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace actorllm::comm {

struct comm_check_options {
  int64_t small_floats = 1024;     ///< 4 KiB: latency
  int64_t large_floats = 4 << 20;  ///< 16 MiB: bandwidth
  int32_t iterations = 5;          ///< timed repetitions (the best is reported)
};

/// One pair's figures (comm/check/link_figures.hpp), as NCCL's check reports them too.
using pair_measurement = pair_figures;

/// What one rank measured.
struct comm_check_report {
  int32_t rank = 0;
  bool all_reduce_ok = false;
  double all_reduce_latency_us = 0;     ///< best small all-reduce
  double all_reduce_bus_gbs = 0;        ///< best large all-reduce, as NCCL-tests' bus bandwidth: 2(n-1)/n × bytes/time
  std::vector<pair_measurement> pairs;  ///< with every higher rank
  std::string error;                    ///< set when the group failed (a peer gone, a timeout)
};

/// Runs the check as `group`'s rank. Never throws: failures end up in the report.
comm_check_report run_comm_check(const std::shared_ptr<gloo_group>& group, const comm_check_options& options);

}  // namespace actorllm::comm
