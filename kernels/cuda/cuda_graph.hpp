// A captured CUDA graph of one backend's stream (backend::op_graph): the instantiated executable graph, launched on
// that stream by each replay. cuda_backend::capture_graph makes them; model/decode_graphs owns them.
#pragma once

#include "kernels/backend.hpp"

#include <cuda_runtime.h>

#include <functional>
#include <memory>

namespace actorllm::cuda {

/// An instantiated graph, replayed on the stream it was captured from.
class cuda_graph final : public op_graph {
 public:
  /// Takes ownership of `exec`; `stream` (of device `device_index`) must outlive the graph.
  cuda_graph(int device_index, cudaStream_t stream, cudaGraphExec_t exec);
  ~cuda_graph() override;
  cuda_graph(const cuda_graph&) = delete;
  cuda_graph& operator=(const cuda_graph&) = delete;

  void replay() override;

 private:
  int device_;
  cudaStream_t stream_;
  cudaGraphExec_t exec_;
};

/// Captures what `record` enqueues on `stream` (thread-local capture mode: other threads' CUDA calls are not
/// affected) and instantiates it. `stream` must be idle and not capturing. When `record` throws, or the capture
/// fails (an illegal call inside it), the partial graph is destroyed and the error propagates.
std::unique_ptr<cuda_graph> capture_stream(int device_index, cudaStream_t stream, const std::function<void()>& record);

}  // namespace actorllm::cuda
