// `actorllm check`'s rounds, by transport.
#include "comm/check/check_round.hpp"

#include "comm/check/comm_check.hpp"
#include "comm/check/custom_all_reduce_check.hpp"
#include "comm/check/gpu_check_peers.hpp"
#include "comm/check/nccl_check.hpp"
#include "comm/device_communicator.hpp"
#include "comm/device_rendezvous.hpp"
#include "comm/gloo_group.hpp"
#include "comm/transport_choice.hpp"

#include <chrono>
#include <exception>
#include <memory>

namespace actorllm::comm {

namespace {

/// A check's figures in its result message: Gloo's comm_check_report and NCCL's nccl_check_report have the
/// same fields.
template <class Report>
void put_figures(const Report& r, comm_check_result& out) {
  out.all_reduce_ok = r.all_reduce_ok;
  out.all_reduce_latency_us = r.all_reduce_latency_us;
  out.all_reduce_bus_gbs = r.all_reduce_bus_gbs;
  for (const auto& p : r.pairs)
    out.pairs.push_back({p.peer, p.ok, p.latency_us, p.bandwidth_gbs, p.error});
  out.error = r.error;
}

/// The NCCL half of `actorllm check` on this worker: every rank says which GPU it takes (its device index on the
/// node mod the GPUs it sees: the one CUDA_VISIBLE_DEVICES leaves it on a node that reports GPUs, one GPU per CPU
/// slice on a node that reports `--cpu-devices`), all decide alike whether NCCL applies
/// (choose_device_transport), and if it does they measure over one communicator whose unique id travels through
/// the registry's store.
comm_check_result nccl_round(rendezvous_store& store, const comm_check_request& req, const std::string& host) {
  comm_check_result out;
  out.rank = req.rank;
  out.host = host;
  out.transport = "nccl";
  try {
    const std::chrono::milliseconds timeout{req.timeout_ms};
    const std::string key = device_group_key(req.group_name, 0);
    gpu_check_peers peers = meet_gpu_check_peers(store, req, timeout);
    const device_transport_choice choice = choose_device_transport(peers.devices, nccl_mode::automatic);
    if (choice.transport != device_transport::nccl) {
      out.skipped = choice.reason;
      return out;
    }
    const std::vector<char> id = exchange_unique_id(store, key, req.rank, &make_nccl_unique_id, timeout);
    nccl_check_options options;
    options.small_floats = req.small_floats;
    options.large_floats = req.large_floats;
    options.iterations = req.iterations;
    out.transport = "nccl " + nccl_version();
    put_figures(run_nccl_check(id, req.rank, req.world, *peers.be, req.group_name, timeout, options), out);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

comm_check_result gloo_round(rendezvous_store& store, const comm_check_request& req, const std::string& host) {
  comm_check_result out;
  out.rank = req.rank;
  out.host = host;
  out.transport = "gloo/tcp";
  try {
    gloo_group_options options;
    options.host = host;
    options.timeout = std::chrono::milliseconds{req.timeout_ms};
    auto group = std::make_shared<gloo_group>(store, req.group_name, req.rank, req.world, options);
    comm_check_options check;
    check.small_floats = req.small_floats;
    check.large_floats = req.large_floats;
    check.iterations = req.iterations;
    put_figures(run_comm_check(group, check), out);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace

comm_check_result run_check_round(rendezvous_store& store, const comm_check_request& req, const std::string& host) {
  if (req.transport == "nccl")
    return nccl_round(store, req, host);
  if (req.transport == "custom") {
    comm_check_result out = run_custom_all_reduce_check(store, req);
    out.host = host;
    return out;
  }
  return gloo_round(store, req, host);
}

}  // namespace actorllm::comm
