// Capturing and replaying a stream's work as a CUDA graph. Unverified without a GPU: written against the CUDA 13
// runtime API (cudaStreamBeginCapture / EndCapture, cudaGraphInstantiate with flags, cudaGraphLaunch); the GPU tests
// in tests/kernels/cuda/decode_graphs_gpu_test.cpp run it.
#include "kernels/cuda/cuda_graph.hpp"

#include "kernels/cuda/cuda_check.hpp"

namespace actorllm::cuda {

cuda_graph::cuda_graph(int device_index, cudaStream_t stream, cudaGraphExec_t exec)
    : device_(device_index), stream_(stream), exec_(exec) {}

cuda_graph::~cuda_graph() {
  if (exec_ != nullptr) {
    cudaSetDevice(device_);
    cudaGraphExecDestroy(exec_);
  }
}

void cuda_graph::replay() {
  ACTORLLM_CUDA_CHECK(cudaSetDevice(device_));
  ACTORLLM_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

std::unique_ptr<cuda_graph> capture_stream(int device_index, cudaStream_t stream, const std::function<void()>& record) {
  ACTORLLM_CUDA_CHECK(cudaSetDevice(device_index));
  ACTORLLM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    record();
  } catch (...) {
    // End the capture whatever state it is in (an illegal call invalidates it), so the stream is usable again.
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr)
      cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  ACTORLLM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0ULL);
  cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  ACTORLLM_CUDA_CHECK(err);
  return std::make_unique<cuda_graph>(device_index, stream, exec);
}

}  // namespace actorllm::cuda
