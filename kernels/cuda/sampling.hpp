// The batched sampling kernel: one CUDA block per row runs sampling_math.hpp's sample_one_row over the row's logits
// in device memory, from descriptors prepared by sampling_plan.hpp; only the small per-row results are written.
#pragma once

#include "kernels/cuda/sampling_math.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// Threads per row: a multiple of 32, at most 1024. A row takes some 20 passes over the vocabulary (more with top_k,
/// top_p or top logprobs), so a small batch's latency scales with the passes' length; 1024 keeps it short, and large
/// batches still fill the GPU with one block per row. Not timed yet (no GPU here): tune on one.
inline constexpr int sample_threads = 1024;

/// Samples rows [0, n_rows) of `batch`, whose pointers are all device addresses, on `stream` (asynchronous).
void sample_rows(const sampling::batch_view& batch, int64_t n_rows, cudaStream_t stream);

}  // namespace actorllm::cuda
