// Every CUDA runtime call and kernel launch is checked: a failure throws with the call, file and line.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace actorllm::cuda {

/// Thrown when a CUDA call fails.
struct cuda_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  throw cuda_error(std::string{what} + " failed at " + file + ":" + std::to_string(line) + ": " +
                   cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace actorllm::cuda

/// Checks a cudaError_t-returning call.
#define ACTORLLM_CUDA_CHECK(call)                                                   \
  do {                                                                              \
    cudaError_t actorllm_err_ = (call);                                             \
    if (actorllm_err_ != cudaSuccess)                                               \
      ::actorllm::cuda::throw_cuda_error(actorllm_err_, #call, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch just made (configuration errors surface here; execution errors at the next sync).
#define ACTORLLM_CUDA_CHECK_LAUNCH() ACTORLLM_CUDA_CHECK(cudaGetLastError())
