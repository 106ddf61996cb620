// The communication check: see comm_check.hpp.
#include "comm/check/comm_check.hpp"

#include "comm/gloo_collective.hpp"
#include "comm/gloo_pipe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>

namespace actorllm::comm {
namespace {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

/// Tags of the pair phase: distinct per (pair, iteration, direction, size) so that no message is taken for another.
uint64_t tag_of(int32_t lo, int32_t hi, int32_t world, int32_t iteration, int32_t kind) {
  const auto pair = static_cast<uint64_t>(lo) * static_cast<uint64_t>(world) + static_cast<uint64_t>(hi);
  return ((pair * 1024 + static_cast<uint64_t>(iteration)) << 3) | static_cast<uint64_t>(kind);
}

}  // namespace

comm_check_report run_comm_check(const std::shared_ptr<gloo_group>& group, const comm_check_options& options) {
  comm_check_report report;
  report.rank = group->rank();
  const int32_t world = group->size();
  const int32_t me = group->rank();
  try {
    // 1. All-reduce: rank r contributes r + 1 everywhere, so every element must come out as world(world+1)/2.
    gloo_collective collective{group};
    const float expected = static_cast<float>(world) * static_cast<float>(world + 1) / 2.0f;
    double best_small = std::numeric_limits<double>::max();
    double best_large = std::numeric_limits<double>::max();
    bool ok = true;
    for (int32_t i = 0; i < options.iterations; ++i) {
      std::vector<float> small(static_cast<size_t>(options.small_floats), static_cast<float>(me + 1));
      auto t0 = clock::now();
      collective.all_reduce_sum(small.data(), static_cast<int64_t>(small.size()));
      best_small = std::min(best_small, seconds_since(t0));
      std::vector<float> large(static_cast<size_t>(options.large_floats), static_cast<float>(me + 1));
      t0 = clock::now();
      collective.all_reduce_sum(large.data(), static_cast<int64_t>(large.size()));
      best_large = std::min(best_large, seconds_since(t0));
      ok = ok && std::all_of(small.begin(), small.end(), [&](float v) { return v == expected; }) &&
           std::all_of(large.begin(), large.end(), [&](float v) { return v == expected; });
    }
    report.all_reduce_ok = ok;
    report.all_reduce_latency_us = best_small * 1e6;
    const double bytes = static_cast<double>(options.large_floats) * sizeof(float);
    report.all_reduce_bus_gbs = world > 1 ? 2.0 * (world - 1) / world * bytes / best_large / 1e9 : 0.0;

    // 2. Every pair, in one global order that every rank walks: ping-pong of the small payload for latency, the
    // large payload one way (acknowledged by a small reply) for bandwidth. The payload carries its sender's rank
    // so the receiver verifies what arrived.
    gloo_pipe pipe{group};
    for (int32_t lo = 0; lo < world; ++lo) {
      for (int32_t hi = lo + 1; hi < world; ++hi) {
        if (me != lo && me != hi)
          continue;
        const int32_t peer = me == lo ? hi : lo;
        double best_rtt = std::numeric_limits<double>::max();
        double best_bulk = std::numeric_limits<double>::max();
        bool pair_ok = true;
        std::vector<float> small(static_cast<size_t>(options.small_floats));
        std::vector<float> large(static_cast<size_t>(options.large_floats));
        const auto mine = static_cast<float>(me);
        for (int32_t i = 0; i < options.iterations; ++i) {
          if (me == lo) {
            std::fill(small.begin(), small.end(), mine);
            auto t0 = clock::now();
            pipe.send(peer, tag_of(lo, hi, world, i, 0), small.data(), static_cast<int64_t>(small.size()));
            pipe.recv(peer, tag_of(lo, hi, world, i, 1), small.data(), static_cast<int64_t>(small.size()));
            best_rtt = std::min(best_rtt, seconds_since(t0));
            pair_ok = pair_ok && small.front() == static_cast<float>(peer) && small.back() == static_cast<float>(peer);
            std::fill(large.begin(), large.end(), mine);
            t0 = clock::now();
            pipe.send(peer, tag_of(lo, hi, world, i, 2), large.data(), static_cast<int64_t>(large.size()));
            pipe.recv(peer, tag_of(lo, hi, world, i, 3), small.data(), static_cast<int64_t>(small.size()));
            best_bulk = std::min(best_bulk, seconds_since(t0));
            pair_ok = pair_ok && small.front() == static_cast<float>(peer);
          } else {
            pipe.recv(peer, tag_of(lo, hi, world, i, 0), small.data(), static_cast<int64_t>(small.size()));
            pair_ok = pair_ok && small.front() == static_cast<float>(peer) && small.back() == static_cast<float>(peer);
            std::fill(small.begin(), small.end(), mine);
            pipe.send(peer, tag_of(lo, hi, world, i, 1), small.data(), static_cast<int64_t>(small.size()));
            pipe.recv(peer, tag_of(lo, hi, world, i, 2), large.data(), static_cast<int64_t>(large.size()));
            pair_ok = pair_ok && large.front() == static_cast<float>(peer) && large.back() == static_cast<float>(peer);
            pipe.send(peer, tag_of(lo, hi, world, i, 3), small.data(), static_cast<int64_t>(small.size()));
          }
        }
        pipe.flush();
        if (me == lo) {
          report.pairs.push_back(pair_figures_of(peer, pair_ok, best_rtt, best_bulk,
                                                 options.large_floats * static_cast<int64_t>(sizeof(float))));
        } else if (!pair_ok) {
          report.error = "payload from rank " + std::to_string(peer) + " did not verify";
        }
      }
    }
  } catch (const std::exception& e) {
    report.error = e.what();
  }
  return report;
}

}  // namespace actorllm::comm
