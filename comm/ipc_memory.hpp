// Device memory shared between the processes of one node (CUDA IPC), behind a small interface so the protocol that
// exchanges it (comm/ipc_handshake) is tested on the CPU with a fake, and the custom all-reduce (kernels/cuda) gets
// every rank's buffers as addresses of its own process.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace actorllm {

/// An exported allocation: the 64 opaque bytes of a cudaIpcMemHandle_t (CUDA_IPC_HANDLE_SIZE).
struct ipc_handle {
  static constexpr size_t size = 64;
  std::array<unsigned char, size> bytes{};
  friend bool operator==(const ipc_handle&, const ipc_handle&) = default;
};

/// Exports this process's allocations and maps other processes' into it. The CUDA implementation is
/// comm/cuda/cuda_ipc_backend; tests use a fake over host memory.
class ipc_backend {
 public:
  virtual ~ipc_backend() = default;
  /// The handle of the allocation starting at `base` (the start of a device allocation: IPC exports whole
  /// allocations).
  virtual ipc_handle export_handle(void* base) = 0;
  /// Maps a peer's allocation into this process; returns its address here.
  virtual void* open_handle(const ipc_handle& handle) = 0;
  /// Unmaps what open_handle returned.
  virtual void close_handle(void* mapped) = 0;
  /// The device this process's allocations live on, named so that every process names it alike (CUDA: its PCI
  /// location, whatever CUDA_VISIBLE_DEVICES each process has); published so peers can tell whether they share it.
  /// Not an ordinal: never pass it to cudaSetDevice.
  virtual int device_id() const = 0;
  /// The same device as this process numbers it (CUDA: the visible ordinal cudaSetDevice takes).
  virtual int device_index() const = 0;
  /// Whether a handle exported by this very process may be opened here: CUDA refuses it (cudaIpcOpenMemHandle in
  /// the exporting process fails), a fake over host memory allows it so ranks can be threads of one test.
  virtual bool opens_own_process() const { return false; }
};

/// One rank's two shared allocations: the data buffer (messages are staged there) and the signal buffer (barrier
/// flags).
struct ipc_rank_buffers {
  void* data = nullptr;
  void* signal = nullptr;
  int device_id = -1;  ///< ipc_backend::device_id(): the same for ranks on one device, not an ordinal
};

/// Every rank's buffers as addresses in this process: this rank's as allocated, the peers' as opened through the
/// backend. Closes the peers' mappings when destroyed (never this rank's own allocations, which their owner frees).
class ipc_peer_buffers {
 public:
  /// `backend` must outlive this.
  ipc_peer_buffers(ipc_backend& backend, int rank, int world_size, size_t data_bytes, size_t signal_bytes);
  ~ipc_peer_buffers();
  ipc_peer_buffers(const ipc_peer_buffers&) = delete;
  ipc_peer_buffers& operator=(const ipc_peer_buffers&) = delete;

  /// Records this rank's own buffers.
  void set_own(const ipc_rank_buffers& own);
  /// Records a peer's buffers, already opened through the backend: closed by this object from now on.
  void set_opened_peer(int peer, const ipc_rank_buffers& mapped);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  /// This rank's device as this process numbers it (the ordinal to make current before touching the buffers).
  int device_index() const { return backend_.device_index(); }
  size_t data_bytes() const { return data_bytes_; }
  size_t signal_bytes() const { return signal_bytes_; }
  /// Rank r's buffers as seen from this process.
  const ipc_rank_buffers& at(int r) const { return ranks_.at(static_cast<size_t>(r)); }
  /// Whether every rank reported the same device (several processes on one GPU).
  bool all_on_one_device() const;
  /// Whether two ranks reported the same device.
  bool any_shared_device() const;

 private:
  ipc_backend& backend_;
  int rank_;
  size_t data_bytes_;
  size_t signal_bytes_;
  std::vector<ipc_rank_buffers> ranks_;
  std::vector<bool> opened_;
};

}  // namespace actorllm
