// The NCCL communication check: see nccl_check.hpp. Times are host wall-clock times of the operation queued and its
// stream synchronised (Gloo's figures are blocking calls timed the same way), so they include a launch and a sync.
#include "comm/check/nccl_check.hpp"

#include "comm/device_communicator.hpp"

#ifdef ACTORLLM_HAVE_NCCL
#include "comm/cuda/nccl_collective.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#endif

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <limits>

namespace actorllm {

#ifdef ACTORLLM_HAVE_NCCL
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Every element of `t` (f32 on be's device) equals `want`.
bool all_equal(backend& be, const tensor& t, float want) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  be.download(t, host.data(), t.nbytes());
  return std::all_of(host.begin(), host.end(), [&](float v) { return v == want; });
}

void fill(backend& be, const tensor& t, float v) {
  const std::vector<float> host(static_cast<size_t>(t.numel()), v);
  be.upload(t, host.data(), t.nbytes());
}

}  // namespace
#endif

nccl_check_report run_nccl_check(std::span<const char> unique_id, int rank, int world, backend& be,
                                 const std::string& group, std::chrono::milliseconds timeout,
                                 const nccl_check_options& options) {
  nccl_check_report report;
#ifdef ACTORLLM_HAVE_NCCL
  try {
    auto* gpu = dynamic_cast<cuda::cuda_backend*>(&be);
    if (gpu == nullptr)
      throw std::runtime_error(fmt::format("rank {} runs on {}, not a CUDA GPU", rank, be.where().to_string()));
    cuda::nccl_options nccl;
    nccl.group = group;
    nccl.timeout = timeout;
    cuda::nccl_collective comm{unique_id, rank, world, *gpu, nccl};

    // 1. All-reduce: rank r contributes r + 1 everywhere, so every element must come out as world(world+1)/2.
    const float expected = static_cast<float>(world) * static_cast<float>(world + 1) / 2.0f;
    const tensor small = be.alloc(dtype::f32, {options.small_floats});
    const tensor large = be.alloc(dtype::f32, {options.large_floats});
    double best_small = std::numeric_limits<double>::max(), best_large = best_small;
    bool ok = true;
    for (int32_t i = -1; i < options.iterations; ++i) {  // i = -1: warm-up, NCCL connects lazily
      fill(be, small, static_cast<float>(rank + 1));
      fill(be, large, static_cast<float>(rank + 1));
      be.synchronize();
      auto t0 = clock_type::now();
      comm.all_reduce_sum(small);
      be.synchronize();
      const double t_small = seconds_since(t0);
      t0 = clock_type::now();
      comm.all_reduce_sum(large);
      be.synchronize();
      const double t_large = seconds_since(t0);
      comm.raise_if_broken();
      ok = ok && all_equal(be, small, expected) && all_equal(be, large, expected);
      if (i >= 0) {
        best_small = std::min(best_small, t_small);
        best_large = std::min(best_large, t_large);
      }
    }
    report.all_reduce_ok = ok;
    report.all_reduce_latency_us = best_small * 1e6;
    const double bytes = static_cast<double>(options.large_floats) * sizeof(float);
    report.all_reduce_bus_gbs = world > 1 ? 2.0 * (world - 1) / world * bytes / best_large / 1e9 : 0.0;

    // 2. Every pair, in one global order every rank walks; the payload carries its sender's rank.
    const tensor ack = be.alloc(dtype::f32, {1});
    const tensor echo = be.alloc(dtype::f32, {options.small_floats});
    for (int32_t lo = 0; lo < world; ++lo) {
      for (int32_t hi = lo + 1; hi < world; ++hi) {
        if (rank != lo && rank != hi)
          continue;
        const int32_t peer = rank == lo ? hi : lo;
        double best_rtt = std::numeric_limits<double>::max(), best_bulk = best_rtt;
        bool pair_ok = true;
        for (int32_t i = -1; i < options.iterations; ++i) {
          if (rank == lo) {
            fill(be, small, static_cast<float>(rank));
            fill(be, large, static_cast<float>(rank));
            be.synchronize();
            auto t0 = clock_type::now();
            comm.send(small, peer);
            comm.recv(small, peer);
            be.synchronize();
            const double rtt = seconds_since(t0);
            t0 = clock_type::now();
            comm.send(large, peer);
            comm.recv(ack, peer);
            be.synchronize();
            const double bulk = seconds_since(t0);
            comm.raise_if_broken();
            pair_ok = pair_ok && all_equal(be, small, static_cast<float>(peer));
            if (i >= 0) {
              best_rtt = std::min(best_rtt, rtt);
              best_bulk = std::min(best_bulk, bulk);
            }
          } else {
            fill(be, echo, static_cast<float>(rank));
            be.synchronize();
            comm.recv(small, peer);
            comm.send(echo, peer);  // queued behind the recv on the one stream: answers as soon as it arrived
            comm.recv(large, peer);
            comm.send(ack, peer);
            be.synchronize();
            comm.raise_if_broken();
            pair_ok = pair_ok && all_equal(be, small, static_cast<float>(peer)) &&
                      all_equal(be, large, static_cast<float>(peer));
          }
        }
        if (rank == lo) {
          report.pairs.push_back(pair_figures_of(peer, pair_ok, best_rtt, best_bulk,
                                                 options.large_floats * static_cast<int64_t>(sizeof(float))));
        } else if (!pair_ok) {
          report.error = fmt::format("payload from rank {} did not verify", peer);
        }
      }
    }
  } catch (const std::exception& e) {
    report.error = e.what();
  }
#else
  (void)unique_id, (void)world, (void)be, (void)timeout, (void)options;
  report.error = fmt::format("NCCL group '{}' rank {}: {}", group, rank, nccl_version());
#endif
  return report;
}

}  // namespace actorllm
