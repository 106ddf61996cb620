// The caching allocator.
#include "kernels/cuda/device_memory.hpp"

#include "kernels/cuda/cuda_check.hpp"

#include <algorithm>
#include <new>

namespace actorllm::cuda {

size_t round_allocation(size_t bytes) {
  constexpr size_t small_step = 512, large_step = size_t{2} << 20, small_limit = size_t{1} << 20;
  if (bytes == 0)
    return 0;
  const size_t step = bytes < small_limit ? small_step : large_step;
  return (bytes + step - 1) / step * step;
}

device_memory_pool::device_memory_pool(int device_index) : device_(device_index) {}

device_memory_pool::~device_memory_pool() { release_cached(); }

std::shared_ptr<buffer> device_memory_pool::allocate(size_t bytes) {
  const size_t rounded = std::max<size_t>(round_allocation(bytes), 512);  // a 0-byte tensor still gets an address
  void* ptr = nullptr;
  {
    std::lock_guard lock{mutex_};
    if (auto it = free_.find(rounded); it != free_.end()) {
      ptr = it->second;
      free_.erase(it);
      usage_.cached -= rounded;
    }
  }
  if (ptr == nullptr) {
    ACTORLLM_CUDA_CHECK(cudaSetDevice(device_));
    cudaError_t err = cudaMalloc(&ptr, rounded);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky, but clear it before the retry
      release_cached();
      err = cudaMalloc(&ptr, rounded);
      if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        throw std::bad_alloc();
      }
    }
    if (err != cudaSuccess)
      throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
  }
  {
    std::lock_guard lock{mutex_};
    usage_.in_use += rounded;
    usage_.peak_in_use = std::max(usage_.peak_in_use, usage_.in_use);
  }
  return std::make_shared<device_buffer>(shared_from_this(), ptr, rounded);
}

void device_memory_pool::give_back(void* ptr, size_t bytes) {
  std::lock_guard lock{mutex_};
  free_.emplace(bytes, ptr);
  usage_.in_use -= bytes;
  usage_.cached += bytes;
}

void device_memory_pool::release_cached() {
  std::multimap<size_t, void*> blocks;
  {
    std::lock_guard lock{mutex_};
    blocks.swap(free_);
    usage_.cached = 0;
  }
  if (blocks.empty())
    return;
  cudaSetDevice(device_);
  cudaDeviceSynchronize();  // a cached block may still be read by queued work of the stream that freed it
  for (auto& [bytes, ptr] : blocks)
    cudaFree(ptr);  // never throws: runs in destructors
}

pool_usage device_memory_pool::usage() const {
  std::lock_guard lock{mutex_};
  return usage_;
}

void device_memory_pool::reset_peak() {
  std::lock_guard lock{mutex_};
  usage_.peak_in_use = usage_.in_use;
}

device_buffer::device_buffer(std::shared_ptr<device_memory_pool> pool, void* ptr, size_t bytes)
    : pool_(std::move(pool)), ptr_(ptr), bytes_(bytes) {}

device_buffer::~device_buffer() { pool_->give_back(ptr_, bytes_); }

}  // namespace actorllm::cuda
