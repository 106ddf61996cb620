// Shared by the CUDA test files: whether a GPU is usable and small device-memory helpers. tests/gpu_skip_listener.cpp
// names each case skipped for want of a GPU ("skipped: no GPU", never a silent pass).
#pragma once

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/device.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <ostream>
#include <vector>

namespace actorllm::cuda_test {

// Asked once, while the test cases register (the skip decorators read it before main runs).
inline bool gpu_available() {
  static const bool available = actorllm::visible_gpu_count() > 0;
  return available;
}

// Run anyway (--no-skip) without a GPU, a case fails here with the reason instead of aborting in a CUDA call.
inline void require_gpu() { REQUIRE_MESSAGE(gpu_available(), "no usable GPU: " << actorllm::gpu_unavailable_reason()); }

// Visible GPUs, asked once. Cases that need several carry "(N GPUs)" in their name; tests/gpu_skip_listener.cpp then
// says "skipped: needs N GPUs" on a machine with fewer.
inline int gpu_count() {
  static const int count = actorllm::visible_gpu_count();
  return count;
}

// As require_gpu, for a case that needs `n` GPUs.
inline void require_gpus(int n) {
  REQUIRE_MESSAGE(gpu_count() >= n, "needs " << n << " GPUs, " << gpu_count() << " visible");
}

/// cudaMalloc'd floats (or any trivially copyable T), freed on scope exit. The copies run on the legacy default stream
/// (kernels launched on stream 0 see them); work on a cudaStreamNonBlocking stream must upload on that stream instead.
template <class T = float>
struct device_array {
  explicit device_array(size_t n) : size(n) { ACTORLLM_CUDA_CHECK(cudaMalloc(&ptr, (n == 0 ? 1 : n) * sizeof(T))); }
  explicit device_array(const std::vector<T>& host) : device_array(host.size()) {
    ACTORLLM_CUDA_CHECK(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~device_array() { cudaFree(ptr); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  std::vector<T> to_host() const {
    std::vector<T> out(size);
    ACTORLLM_CUDA_CHECK(cudaMemcpy(out.data(), ptr, size * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
  T* ptr = nullptr;
  size_t size = 0;
};

}  // namespace actorllm::cuda_test
