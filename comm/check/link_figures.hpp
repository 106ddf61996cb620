// The figures `actorllm check` reports for one pair of ranks, whatever carried the bytes (Gloo: comm/check/comm_check,
// NCCL: comm/check/nccl_check): latency from the best small round trip, bandwidth from the best one-way bulk transfer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace actorllm {

/// One pair's figures, measured by the lower rank of the pair.
struct pair_figures {
  int32_t peer = 0;
  bool ok = false;
  double latency_us = 0;     ///< half the best small round trip
  double bandwidth_gbs = 0;  ///< large payload bytes / best one-way time, GB/s
  std::string error;
};

/// The figures of the pair with `peer` from its best small round trip and its best bulk transfer (seconds; the bulk
/// time includes a small acknowledgement, whose one-way time is taken off), `large_bytes` per transfer. A pair whose
/// payloads did not verify (`ok` false) says so in its error.
inline pair_figures pair_figures_of(int32_t peer, bool ok, double best_round_trip_s, double best_bulk_s,
                                    int64_t large_bytes) {
  pair_figures m;
  m.peer = peer;
  m.ok = ok;
  m.latency_us = best_round_trip_s / 2 * 1e6;
  const double one_way_small = best_round_trip_s / 2;
  m.bandwidth_gbs = static_cast<double>(large_bytes) / std::max(best_bulk_s - one_way_small, 1e-9) / 1e9;
  if (!ok)
    m.error = "payload mismatch";
  return m;
}

}  // namespace actorllm
