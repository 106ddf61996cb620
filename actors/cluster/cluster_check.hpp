// `actorllm check`: a communication sanity check over a running cluster, like vLLM's troubleshooting script. One
// worker per device of every node joins one Gloo group; each verifies an all-reduce and measures every pair
// (latency, bandwidth); the results come back as a table. Then the same over NCCL when every worker has a GPU of its
// own and NCCL, and the custom all-reduce's latency and bus bandwidth when those GPUs are on one node (a table each),
// else one line saying why each was skipped.
#pragma once

#include "actors/cluster/control_network.hpp"

#include <cstdint>
#include <iosfwd>
#include <string>

namespace actorllm::actors {

struct cluster_check_options {
  std::string address;  ///< the head, HOST:PORT
  std::string token;
  control_tls tls;  ///< the cluster's control-plane TLS (resolved and checked by the caller)
  int64_t large_bytes = 16 << 20;
  int32_t iterations = 5;
  int32_t max_workers_per_node = 0;  ///< 0: one per device
};

/// Runs the check and prints the table to `out`. Returns 0 when every rank and pair verified, 1 otherwise (the
/// reasons are printed). Throws actorllm::error when the cluster cannot be reached.
int run_cluster_check(const cluster_check_options& options, std::ostream& out);

}  // namespace actorllm::actors
