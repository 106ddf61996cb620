// The CUDA implementation of ipc_backend: cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle on one
// device. What comm/ipc_handshake maps the peers' custom all-reduce buffers with.
#pragma once

#include "comm/ipc_memory.hpp"

namespace actorllm::cuda {

/// IPC of device memory on visible device `device_index` (made current for every call). Handles may be opened only
/// in another process than the one that exported them (CUDA's rule; opens_own_process() is false), also when both
/// processes use the same device.
class cuda_ipc_backend final : public ipc_backend {
 public:
  /// Reads the device's PCI location, which names it across processes whatever CUDA_VISIBLE_DEVICES each one has.
  explicit cuda_ipc_backend(int device_index);

  /// `base` must be the start of a cudaMalloc allocation (IPC exports whole allocations).
  ipc_handle export_handle(void* base) override;
  /// Maps with cudaIpcMemLazyEnablePeerAccess (peer access is enabled on first use when the devices differ).
  void* open_handle(const ipc_handle& handle) override;
  void close_handle(void* mapped) override;
  /// The device's PCI domain, bus and device numbers packed in one int (not its visible index: cluster workers each
  /// see their own GPU as device 0).
  int device_id() const override { return pci_id_; }
  int device_index() const override { return device_; }

 private:
  int device_;
  int pci_id_ = 0;
};

}  // namespace actorllm::cuda
