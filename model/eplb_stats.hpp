// What expert-parallel load balancing did (model/expert_balancer), as the shard reports it with each step's result:
// a plain struct of its own so that the runner's and the protocol's headers need nothing else of the balancer.
#pragma once

#include <cstdint>

namespace actorllm::model {

/// What the balancer did, for logs and metrics.
struct eplb_stats {
  uint64_t rearrangements = 0;
  double last_stall_seconds = 0.0;  ///< the last rearrangement's duration (the steps wait that long)
  /// Tokens per EP rank at the last rearrangement, summed over the shard's MoE layers of each layer's mean and max
  /// over the ranks. before: what the ranks served since the previous rearrangement (measured); after: the window's
  /// load as the new placement serves it (each expert's tokens split evenly over its replicas).
  double mean_before = 0.0;
  double max_before = 0.0;
  double mean_after = 0.0;
  double max_after = 0.0;

  friend bool operator==(const eplb_stats&, const eplb_stats&) = default;
};

}  // namespace actorllm::model
