// The batched LoRA kernels. Shrink: one block per (row, rank) pair, each thread one strided part of the n_in-long dot
// product, then a block-wide f32 sum; a pair is a few KiB of a and x, and one block each keeps every pair's loads in
// flight at once at decode (1 row x rank 16 = 16 blocks) where one block per row would serialise them. Expand: a
// grid of (rows, output tiles), one thread per output. Rows without a usable slot return before loading anything.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/lora.hpp"
#include "kernels/cuda/lora_math.hpp"

#include <cstdint>

namespace actorllm::cuda {
namespace {

template <int V>
__global__ void __launch_bounds__(lora::max_shrink_threads)
    lora_shrink_kernel(const float* __restrict__ x, const float* __restrict__ a, const int32_t* __restrict__ row_slots,
                       int64_t n_in, int64_t n_slots, int64_t rank, float* __restrict__ shrunk) {
  const int64_t pair = blockIdx.x, t = pair / rank, r = pair % rank;
  const int32_t s = lora::row_slot(row_slots, t, n_slots);
  if (s < 0)  // the whole block: block_sum below is never reached by only part of it
    return;
  const float* a_row = a + (static_cast<int64_t>(s) * rank + r) * n_in;
  const float part =
      lora::shrink_partial<V>(a_row, x + t * n_in, n_in, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  const float total = block_sum(part);
  if (threadIdx.x == 0)
    shrunk[pair] = total;
}

template <int V>
__global__ void __launch_bounds__(lora::expand_threads)
    lora_expand_kernel(const float* __restrict__ b, const int32_t* __restrict__ row_slots,
                       const float* __restrict__ shrunk, int64_t n_out, int64_t n_slots, int64_t rank,
                       float* __restrict__ y) {
  const int64_t t = blockIdx.x;
  const int32_t s = lora::row_slot(row_slots, t, n_slots);
  if (s < 0)
    return;
  const float* b_slot = b + static_cast<int64_t>(s) * n_out * rank;
  const float* shrunk_row = shrunk + t * rank;
  float* y_row = y + t * n_out;
  const int64_t stride = static_cast<int64_t>(gridDim.y) * blockDim.x;
  for (int64_t o = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < n_out; o += stride)
    y_row[o] += lora::expand_dot<V>(b_slot + o * rank, shrunk_row, rank);
}

bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void lora_add(const float* x, const float* a, const float* b, const int32_t* row_slots, const lora_dims& d,
              float* shrunk, float* y, cudaStream_t stream) {
  if (d.n <= 0 || d.rank <= 0 || d.n_slots <= 0)
    return;
  const int64_t pairs = d.n * d.rank;  // at most max_grid_x: cuda_backend checks
  const int shrink_vector = lora::vector_of(d.n_in, aligned_16(x) && aligned_16(a));
  const auto shrink_block = static_cast<unsigned>(lora::shrink_threads(d.n_in, shrink_vector));
  if (shrink_vector == 4)
    lora_shrink_kernel<4>
        <<<static_cast<unsigned>(pairs), shrink_block, 0, stream>>>(x, a, row_slots, d.n_in, d.n_slots, d.rank, shrunk);
  else
    lora_shrink_kernel<1>
        <<<static_cast<unsigned>(pairs), shrink_block, 0, stream>>>(x, a, row_slots, d.n_in, d.n_slots, d.rank, shrunk);
  ACTORLLM_CUDA_CHECK_LAUNCH();
  if (d.n_out <= 0)
    return;
  const int expand_vector = lora::vector_of(d.rank, aligned_16(b) && aligned_16(shrunk));
  const dim3 grid(static_cast<unsigned>(d.n), static_cast<unsigned>(lora::expand_blocks(d.n_out)));
  if (expand_vector == 4)
    lora_expand_kernel<4>
        <<<grid, lora::expand_threads, 0, stream>>>(b, row_slots, shrunk, d.n_out, d.n_slots, d.rank, y);
  else
    lora_expand_kernel<1>
        <<<grid, lora::expand_threads, 0, stream>>>(b, row_slots, shrunk, d.n_out, d.n_slots, d.rank, y);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace actorllm::cuda
