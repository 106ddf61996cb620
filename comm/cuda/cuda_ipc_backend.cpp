// CUDA IPC of device memory.
#include "comm/cuda/cuda_ipc_backend.hpp"

#include "kernels/cuda/cuda_check.hpp"

#include <cstring>

namespace actorllm::cuda {

static_assert(sizeof(cudaIpcMemHandle_t) == ipc_handle::size, "cudaIpcMemHandle_t is CUDA_IPC_HANDLE_SIZE bytes");

cuda_ipc_backend::cuda_ipc_backend(int device_index) : device_(device_index) {
  int domain = 0, bus = 0, dev = 0;
  ACTORLLM_CUDA_CHECK(cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, device_));
  ACTORLLM_CUDA_CHECK(cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, device_));
  ACTORLLM_CUDA_CHECK(cudaDeviceGetAttribute(&dev, cudaDevAttrPciDeviceId, device_));
  pci_id_ = (domain << 16) | (bus << 8) | dev;
}

ipc_handle cuda_ipc_backend::export_handle(void* base) {
  ACTORLLM_CUDA_CHECK(cudaSetDevice(device_));
  cudaIpcMemHandle_t h;
  ACTORLLM_CUDA_CHECK(cudaIpcGetMemHandle(&h, base));
  ipc_handle out;
  std::memcpy(out.bytes.data(), &h, ipc_handle::size);
  return out;
}

void* cuda_ipc_backend::open_handle(const ipc_handle& handle) {
  ACTORLLM_CUDA_CHECK(cudaSetDevice(device_));
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.bytes.data(), ipc_handle::size);
  void* mapped = nullptr;
  ACTORLLM_CUDA_CHECK(cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess));
  return mapped;
}

void cuda_ipc_backend::close_handle(void* mapped) {
  ACTORLLM_CUDA_CHECK(cudaSetDevice(device_));
  ACTORLLM_CUDA_CHECK(cudaIpcCloseMemHandle(mapped));
}

}  // namespace actorllm::cuda
