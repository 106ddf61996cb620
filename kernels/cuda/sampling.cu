// The batched sampling kernel: sampling_math.hpp's algorithm on a CUDA block (warp shuffles, then one thread folds
// the warps' partials in warp order, so every reduction is deterministic and every thread branches alike).
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/sampling.hpp"

namespace actorllm::cuda {
namespace {

// The Block interface of sampling_math.hpp over the threads of one CUDA block.
struct cuda_block {
  int* claims;  // in shared memory

  __device__ int rank() const { return static_cast<int>(threadIdx.x); }
  __device__ int size() const { return static_cast<int>(blockDim.x); }

  template <class T, class Op>
  __device__ T reduce(T v, Op op) {
    __shared__ T partial[33];
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    for (int offset = 16; offset > 0; offset /= 2)
      v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    __syncthreads();  // an earlier call's readers are done with partial
    if (lane == 0)
      partial[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
      T s = partial[0];
      for (unsigned w = 1; w < n_warps; ++w)
        s = op(s, partial[w]);
      partial[32] = s;
    }
    __syncthreads();
    return partial[32];
  }
  __device__ void sync() { __syncthreads(); }
  __device__ void reset_claims() {
    __syncthreads();
    if (threadIdx.x == 0)
      *claims = 0;
    __syncthreads();
  }
  __device__ int claim() { return atomicAdd(claims, 1); }
};

// At least one block per SM: with the bare block size ptxas capped the registers at 32 and spilled.
__global__ void __launch_bounds__(sample_threads, 1) sample_kernel(const sampling::batch_view batch) {
  __shared__ int claims;
  cuda_block block{&claims};
  sampling::sample_one_row(block, batch, static_cast<int64_t>(blockIdx.x));
}

}  // namespace

void sample_rows(const sampling::batch_view& batch, int64_t n_rows, cudaStream_t stream) {
  if (n_rows == 0)
    return;
  sample_kernel<<<static_cast<unsigned>(n_rows), sample_threads, 0, stream>>>(batch);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace actorllm::cuda
