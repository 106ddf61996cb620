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

}  // namespace actorllm::cuda
