// The custom all-reduce's half of `actorllm check` on a GPU node: every worker's GPU joins one custom all-reduce group
// (CUDA IPC, comm/cuda/custom_all_reduce), which sums a small message one-shot (latency) and a large one two-shot
// (bus bandwidth), each verified on every rank: the figures of the all-reduce row of comm_check and nccl_check. It
// applies only where the custom path can run: every rank on a GPU of its own, all on one host, at most 8 ranks;
// elsewhere the result says why it was skipped. Unverified on GPUs (written on a machine without one).
#pragma once

#include "comm/check/check_round.hpp"
#include "comm/device_rendezvous.hpp"
#include "comm/rendezvous_store.hpp"

#include <string>
#include <vector>

namespace actorllm::comm {

/// Why the custom all-reduce check cannot run over ranks on `ranks` (in rank order), or empty when it can: every rank
/// on a GPU of its own ("<host>/<bus id>"), all on one host, at most 8 ranks. Every rank decides from the same list.
std::string custom_all_reduce_check_refusal(const std::vector<rank_device>& ranks);

/// Runs this worker's rank of the custom all-reduce check of `req` (its transport is "custom"), meeting the other
/// ranks through `store`. Never throws: failures end up in the result's error, inapplicability in its `skipped`.
comm_check_result run_custom_all_reduce_check(rendezvous_store& store, const comm_check_request& req);

}  // namespace actorllm::comm
