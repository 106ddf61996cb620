// The launchers of the custom all-reduce kernels: every rank's staging buffer holds its message (copied there
// first), and each rank's kernel writes the sum into its own output. Called by custom_all_reduce; every rank of the
// group launches the same kernel for the same message, or the barriers wait for a partner that never comes (and
// trap after car::barrier_timeout_ns).
#pragma once

#include "comm/cuda/custom_all_reduce_math.hpp"
#include "kernels/cuda/element_type.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace actorllm::cuda {

/// Every rank's buffers, as addresses in this process. The kernels read it from device memory (custom_all_reduce
/// uploads it once): indexed by a run-time rank, a table passed by value would be copied to local memory.
struct car_rank_table {
  void* data[car::max_ranks];
  car::signal_layout* signal[car::max_ranks];
};

/// `ranks` is a device pointer to the table in both launchers.
///
/// One-shot: each rank reads all n elements of every rank's staging buffer and sums them in rank order 0..world-1
/// (acc = x0; acc += x1; ... in f32; bf16 rounded to nearest even once at the end), so every rank gets identical
/// bits. `out` (n elements of `type`, 16-byte aligned) may not be a staging buffer.
void car_one_shot(const car_rank_table* ranks, int rank, int world, int64_t n, element_type type, void* out,
                  cudaStream_t stream);

/// Two-shot: rank r sums partition r (car::partition over the 16-byte packs) of every staging buffer in the same rank
/// order into its own staging buffer, a barrier, then every rank copies each partition from its owner's staging
/// buffer into `out`. The same bits as one-shot. The tail elements after the last whole pack are summed by every rank
/// itself, as in one-shot.
void car_two_shot(const car_rank_table* ranks, int rank, int world, int64_t n, element_type type, void* out,
                  cudaStream_t stream);

}  // namespace actorllm::cuda
