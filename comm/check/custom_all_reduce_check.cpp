// The custom all-reduce check: see custom_all_reduce_check.hpp.
#include "comm/check/custom_all_reduce_check.hpp"

#include "comm/check/gpu_check_peers.hpp"

#include "comm/device_communicator.hpp"
#include "comm/device_rendezvous.hpp"
#include "kernels/backend.hpp"
#include "kernels/device.hpp"

#ifdef ACTORLLM_HAVE_CUDA
#include "comm/cuda/cuda_ipc_backend.hpp"
#include "comm/cuda/custom_all_reduce.hpp"
#include "comm/ipc_handshake.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#endif

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorllm::comm {

std::string custom_all_reduce_check_refusal(const std::vector<rank_device>& ranks) {
  constexpr size_t max_ranks = 8;  // the custom kernels' signal layout (car::max_ranks)
  if (ranks.size() > max_ranks)
    return fmt::format("{} ranks; the custom all-reduce serves at most {}", ranks.size(), max_ranks);
  std::set<std::string> hosts, gpus;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string& id = ranks[r].identity;
    if (id.empty())
      return fmt::format("rank {} is not on a GPU", r);
    if (!gpus.insert(id).second)
      return fmt::format("rank {} shares the GPU {} with another rank (measured only on GPUs of their own)", r, id);
    hosts.insert(id.substr(0, id.find('/')));
  }
  if (hosts.size() > 1)
    return fmt::format("the ranks are on {} hosts; CUDA IPC maps memory within one", hosts.size());
  return {};
}

namespace {

#ifdef ACTORLLM_HAVE_CUDA
// The custom all-reduce needs a fallback of the same group; the check forces the custom paths, so it never runs.
class no_fallback final : public tp_collective {
 public:
  no_fallback(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(const tensor&) override { refuse(); }
  void all_gather(const tensor&, const tensor&) override { refuse(); }
  void all_reduce_sum(float*, int64_t) override { refuse(); }
  void all_gather(const float*, int64_t, float*) override { refuse(); }

 private:
  [[noreturn]] static void refuse() { throw std::logic_error("custom all-reduce check: no fallback collective"); }
  int rank_, size_;
};
#endif

}  // namespace

comm_check_result run_custom_all_reduce_check(rendezvous_store& store, const comm_check_request& req) {
  comm_check_result out;
  out.rank = req.rank;
  out.transport = "custom";
  try {
    const std::chrono::milliseconds timeout{req.timeout_ms};
    const gpu_check_peers meeting = meet_gpu_check_peers(store, req, timeout);
    if (std::string why = custom_all_reduce_check_refusal(meeting.devices); !why.empty()) {
      out.skipped = why;
      return out;
    }
#ifdef ACTORLLM_HAVE_CUDA
    auto& gpu = dynamic_cast<cuda::cuda_backend&>(*meeting.be);
    const int device = gpu.where().index;
    // The large message: two-shot, at most the 8 MiB the custom path takes, a multiple of 16 bytes.
    const int64_t large_floats = std::min<int64_t>(req.large_floats, (int64_t{8} << 20) / 4 - 4) / 4 * 4;
    const int64_t small_floats = std::max<int64_t>(req.small_floats / 4 * 4, 4);
    cuda::custom_all_reduce_memory mem(device, static_cast<size_t>(large_floats) * sizeof(float));
    cuda::cuda_ipc_backend ipc(device);
    ipc_handshake_config cfg;
    cfg.group = req.group_name;
    cfg.epoch = 0;
    cfg.rank = req.rank;
    cfg.world_size = req.world;
    cfg.data = mem.data();
    cfg.data_bytes = mem.data_bytes();
    cfg.signal = mem.signal();
    cfg.signal_bytes = mem.signal_bytes();
    cfg.timeout = timeout;
    auto peers = ipc_handshake(store, ipc, cfg);
    const all_reduce_topology topology = cuda::ipc_group_topology(*peers, false);
    cuda::custom_all_reduce car(std::move(peers), std::make_unique<no_fallback>(req.rank, req.world), topology,
                                gpu.stream());

    // Rank r contributes r + 1 everywhere, so every element must come out as world(world+1)/2 (exact in f32).
    const float expected = static_cast<float>(req.world) * static_cast<float>(req.world + 1) / 2.0f;
    const tensor small = gpu.alloc(dtype::f32, {small_floats});
    const tensor large = gpu.alloc(dtype::f32, {large_floats});
    auto fill = [&](const tensor& t) {
      const std::vector<float> host(static_cast<size_t>(t.numel()), static_cast<float>(req.rank + 1));
      gpu.upload(t, host.data(), t.nbytes());
    };
    auto verified = [&](const tensor& t) {
      std::vector<float> host(static_cast<size_t>(t.numel()));
      gpu.download(t, host.data(), t.nbytes());
      return std::all_of(host.begin(), host.end(), [&](float v) { return v == expected; });
    };
    using clock_type = std::chrono::steady_clock;
    double best_small = std::numeric_limits<double>::max(), best_large = best_small;
    bool ok = true;
    for (int32_t i = -1; i < req.iterations; ++i) {  // i = -1: warm-up
      fill(small);
      fill(large);
      gpu.synchronize();
      auto t0 = clock_type::now();
      car.all_reduce_device(small.data(), small_floats, cuda::element_type::f32, all_reduce_path::custom_one_shot);
      gpu.synchronize();
      const double t_small = std::chrono::duration<double>(clock_type::now() - t0).count();
      t0 = clock_type::now();
      car.all_reduce_device(large.data(), large_floats, cuda::element_type::f32, all_reduce_path::custom_two_shot);
      gpu.synchronize();
      const double t_large = std::chrono::duration<double>(clock_type::now() - t0).count();
      ok = ok && verified(small) && verified(large);
      if (i >= 0) {
        best_small = std::min(best_small, t_small);
        best_large = std::min(best_large, t_large);
      }
    }
    out.transport = "custom (IPC)";
    out.all_reduce_ok = ok;
    out.all_reduce_latency_us = best_small * 1e6;
    const double bytes = static_cast<double>(large_floats) * sizeof(float);
    out.all_reduce_bus_gbs = 2.0 * (req.world - 1) / req.world * bytes / best_large / 1e9;
    if (!ok)
      out.error = "the custom all-reduce's sum did not verify";
#else
    out.skipped = "this build has no CUDA backend";
#endif
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace actorllm::comm
