// Which CUDA devices this process can use.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device.hpp"

namespace actorllm::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error so later calls start clean
    return 0;
  }
  return n;
}

std::vector<device_info> devices() {
  std::vector<device_info> out;
  int n = device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    ACTORLLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    out.push_back(device_info{i, prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  return out;
}

std::string unavailable_reason() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string{cudaGetErrorName(err)} + ": " + cudaGetErrorString(err);
  }
  return n == 0 ? "no CUDA device is visible" : "";
}

double measure_copy_bandwidth(int device_index, size_t bytes, int reps) {
  ACTORLLM_CUDA_CHECK(cudaSetDevice(device_index));
  void* src = nullptr;
  void* dst = nullptr;
  ACTORLLM_CUDA_CHECK(cudaMalloc(&src, bytes));
  ACTORLLM_CUDA_CHECK(cudaMalloc(&dst, bytes));
  cudaEvent_t start = nullptr, stop = nullptr;
  ACTORLLM_CUDA_CHECK(cudaEventCreate(&start));
  ACTORLLM_CUDA_CHECK(cudaEventCreate(&stop));
  ACTORLLM_CUDA_CHECK(cudaMemset(src, 1, bytes));
  ACTORLLM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));  // warm-up
  float best_ms = 0.0f;
  for (int r = 0; r < reps; ++r) {
    ACTORLLM_CUDA_CHECK(cudaEventRecord(start));
    ACTORLLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
    ACTORLLM_CUDA_CHECK(cudaEventRecord(stop));
    ACTORLLM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    ACTORLLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r == 0 || ms < best_ms)
      best_ms = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(src);
  cudaFree(dst);
  return best_ms > 0.0f ? 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) : 0.0;
}

int driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return v;
}

}  // namespace actorllm::cuda
