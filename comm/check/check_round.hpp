// One round of `actorllm check` as every worker runs it, whatever the transport: one group of all the workers, over
// Gloo (host memory, every cluster), NCCL (GPUs, each worker's own) or the custom all-reduce (the GPUs of one node).
// Each verifies an all-reduce (latency, bus bandwidth) and measures every pair; the engine gathers the results into
// the tables (actors/cluster/cluster_check).
#pragma once

#include "comm/rendezvous_store.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::comm {

/// What every worker of a round is asked (the same but `rank` and `device`).
struct comm_check_request {
  int32_t rank = 0;
  int32_t world = 1;
  std::string group_name;  ///< unique per run (rendezvous keys in the registry's store)
  int64_t small_floats = 1024;
  int64_t large_floats = 4 << 20;
  int32_t iterations = 5;
  int64_t timeout_ms = 30000;
  std::string transport = "gloo";  ///< "gloo", "nccl" or "custom" (the custom all-reduce)
  /// The worker's device index on its node: a GPU round runs on visible GPU `device` mod the GPUs the worker sees
  /// (one, CUDA_VISIBLE_DEVICES, on a node that reports GPUs; all of them on a node that reports CPU slices).
  int32_t device = 0;

  friend bool operator==(const comm_check_request&, const comm_check_request&) = default;
};

/// One pair's figures, measured by its lower rank.
struct comm_pair_result {
  int32_t peer = 0;
  bool ok = false;
  double latency_us = 0;
  double bandwidth_gbs = 0;
  std::string error;

  friend bool operator==(const comm_pair_result&, const comm_pair_result&) = default;
};

/// What one worker measured.
struct comm_check_result {
  int32_t rank = 0;
  std::string host;       ///< the address its Gloo device bound
  std::string transport;  ///< e.g. "gloo/tcp"
  bool all_reduce_ok = false;
  double all_reduce_latency_us = 0;
  double all_reduce_bus_gbs = 0;
  std::vector<comm_pair_result> pairs;
  std::string error;
  /// Non-empty when the transport does not apply here (NCCL without GPUs of their own or without NCCL in the build,
  /// the custom all-reduce across nodes): why. Not a failure.
  std::string skipped;

  friend bool operator==(const comm_check_result&, const comm_check_result&) = default;
};

/// Runs this worker's rank of the round `req` asks for, meeting the others through `store`; `host` is the address its
/// Gloo device binds (the data plane's). Never throws: failures end up in the result's error, inapplicability in its
/// `skipped`.
comm_check_result run_check_round(rendezvous_store& store, const comm_check_request& req, const std::string& host);

}  // namespace actorllm::comm
