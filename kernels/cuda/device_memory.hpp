// Device memory for one GPU: a caching allocator (freed blocks are kept by size and handed out again, so a decode
// step allocates nothing from the driver) and the buffer type tensors hold. Every block is used on one stream (the
// backend's), so a block freed while kernels reading it are still queued can be handed out again at once: the next
// user's work is queued behind them.
#pragma once

#include "kernels/tensor.hpp"

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace actorllm::cuda {

/// Allocation sizes are rounded to classes so that blocks of nearby sizes are interchangeable: multiples of 512
/// bytes below 1 MiB, of 2 MiB above. 0 stays 0.
size_t round_allocation(size_t bytes);

/// What a pool holds, in bytes.
struct pool_usage {
  size_t in_use = 0;       ///< handed out and not yet returned
  size_t cached = 0;       ///< returned, kept for reuse
  size_t peak_in_use = 0;  ///< the most in use at once since creation or reset_peak()
};

/// The caching allocator of one device. Thread-safe: buffers may be dropped on any thread.
class device_memory_pool : public std::enable_shared_from_this<device_memory_pool> {
 public:
  explicit device_memory_pool(int device_index);
  ~device_memory_pool();
  device_memory_pool(const device_memory_pool&) = delete;
  device_memory_pool& operator=(const device_memory_pool&) = delete;

  int device_index() const { return device_; }
  /// A block of at least `bytes` (rounded). Empties the cache and retries once when the driver is out of memory;
  /// throws std::bad_alloc when it still does not fit.
  std::shared_ptr<buffer> allocate(size_t bytes);
  /// Gives every cached block back to the driver.
  void release_cached();
  pool_usage usage() const;
  void reset_peak();

 private:
  friend class device_buffer;
  void give_back(void* ptr, size_t bytes);

  int device_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // cached blocks by rounded size
  pool_usage usage_;
};

/// A block of a device_memory_pool; returns to the pool when the last tensor referring to it is dropped.
class device_buffer final : public buffer {
 public:
  device_buffer(std::shared_ptr<device_memory_pool> pool, void* ptr, size_t bytes);
  ~device_buffer() override;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void* data() override { return ptr_; }
  size_t size() const override { return bytes_; }
  device where() const override { return device{device_kind::cuda, pool_->device_index()}; }

 private:
  std::shared_ptr<device_memory_pool> pool_;
  void* ptr_;
  size_t bytes_;
};

}  // namespace actorllm::cuda
