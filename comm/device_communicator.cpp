// The device communicators: NCCL when built in, a clear refusal otherwise.
#include "comm/device_communicator.hpp"

#ifdef ACTORLLM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.hpp"
#endif
#ifdef ACTORLLM_HAVE_NCCL
#include "comm/cuda/nccl_collective.hpp"
#endif

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include <unistd.h>

namespace actorllm {

bool nccl_built() {
#ifdef ACTORLLM_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::string nccl_version() {
#ifdef ACTORLLM_HAVE_NCCL
  return cuda::nccl_collective::library_version();
#else
  return "not built with NCCL (no nccl.h and libnccl found at configure time)";
#endif
}

std::string gpu_identity(backend& be) {
  if (be.where().kind != device_kind::cuda)
    return {};
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0)
    host[0] = '\0';
#ifdef ACTORLLM_HAVE_CUDA
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, be.where().index) == cudaSuccess)
    return fmt::format("{}/{}", host, bus);
  cudaGetLastError();
#endif
  return fmt::format("{}/{}", host, be.where().to_string());  // no bus id: the visible index, the best there is
}

std::vector<char> make_nccl_unique_id() {
#ifdef ACTORLLM_HAVE_NCCL
  return cuda::nccl_collective::new_unique_id();
#else
  throw std::runtime_error("NCCL: " + nccl_version());
#endif
}

device_communicator make_nccl_communicator(std::span<const char> unique_id, int rank, int size, backend& be,
                                           const std::string& group, std::chrono::milliseconds timeout) {
#ifdef ACTORLLM_HAVE_NCCL
  auto* gpu = dynamic_cast<cuda::cuda_backend*>(&be);
  if (gpu == nullptr)
    throw std::runtime_error(
        fmt::format("NCCL group '{}': rank {} runs on {}, not a CUDA GPU", group, rank, be.where().to_string()));
  cuda::nccl_options options;
  options.group = group;
  options.timeout = timeout;
  // NCCL's creation (topology detection, connecting every rank) can take seconds on a big node: never bound it
  // tighter than 30 s, even when the operations are (a test of failure detection may set a short timeout).
  options.init_timeout = std::max(timeout, std::chrono::milliseconds{30'000});
  auto comm = std::make_unique<cuda::nccl_collective>(unique_id, rank, size, *gpu, options);
  device_communicator out;
  out.abort = comm->abort_handle();
  out.peer_link = comm.get();
  out.collective = std::move(comm);
  return out;
#else
  (void)unique_id, (void)size, (void)be, (void)timeout;
  throw std::runtime_error(fmt::format("NCCL group '{}' rank {}: {}", group, rank, nccl_version()));
#endif
}

}  // namespace actorllm
