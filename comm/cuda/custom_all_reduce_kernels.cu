// The custom all-reduce kernels over CUDA-IPC-mapped buffers (vLLM's one-stage / two-stage design, written anew):
// 16-byte loads from every rank's staging buffer, sums in f32 in rank order, per-block flag barriers between ranks.
//
// Memory ordering (the reasoning; unverified on a GPU here; docs/custom-all-reduce.md):
// * A barrier is one flag per (phase, block, sender) in the receiver's signal buffer. Thread k < world of block b
//   stores `flag` into rank k's slot [b][this rank] with release semantics at system scope, then spins on its own
//   slot [b][k] with acquire loads at system scope. System scope, because the peer may be another GPU (over NVLink
//   or PCIe) or another process on this one.
// * Before the release store: __syncthreads() orders every load and store of the block's threads in the phase before
//   the barrier before thread k's release (a CTA barrier, then a release that is cumulative over what the thread has
//   observed), and __threadfence_system() makes that explicit for the stores other threads of the block made.
//   After the acquire: __syncthreads() again, so every thread of the block reads only after thread k has seen peer
//   k's flag, and peer k's writes before its release are visible to the block.
// * Reads of another rank's buffers use ld.global.cg (__ldcg): L1 is not coherent, and a line of a peer's buffer
//   cached by an earlier call or phase must never be read again after the peer rewrote it.
// * start barrier: a peer's staging copy (issued before its kernel, on its stream) is complete before its kernel
//   starts, so its flag tells that its message is in place. end barrier: no rank leaves (and lets its next staging
//   copy overwrite its buffer) before every rank has finished reading it. mid barrier (two-shot): the reduced
//   partitions are written before anyone gathers them.
// * Flags come from a per-block counter in the rank's own signal buffer (written by thread 0 after the end barrier,
//   read by the next launch), so a CUDA graph replaying the launch still gets a fresh flag each time.
#include "comm/cuda/custom_all_reduce_kernels.hpp"
#include "kernels/cuda/cuda_check.hpp"

#include <cuda_bf16.h>
#include <cuda/atomic>

#include <stdexcept>
#include <string>

namespace actorllm::cuda {
namespace {

using car::signal_layout;

enum class barrier_phase { start, mid, end };

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <barrier_phase Phase>
__device__ __forceinline__ uint32_t* flag_slot(signal_layout* s, int block, int sender) {
  if constexpr (Phase == barrier_phase::start)
    return &s->start[block][sender];
  else if constexpr (Phase == barrier_phase::mid)
    return &s->mid[block][sender];
  else
    return &s->end[block][sender];
}

// Block b of every rank meets block b of every other rank (see the ordering notes at the top).
template <barrier_phase Phase>
__device__ __forceinline__ void barrier(const car_rank_table* __restrict__ t, signal_layout* self, int rank, int world,
                                        uint32_t flag) {
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < world) {
    const int peer = static_cast<int>(threadIdx.x);
    __threadfence_system();
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system> theirs(
        *flag_slot<Phase>(t->signal[peer], blockIdx.x, rank));
    theirs.store(flag, ::cuda::std::memory_order_release);
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system> mine(*flag_slot<Phase>(self, blockIdx.x, peer));
    const uint64_t began = global_time_ns();
    while (mine.load(::cuda::std::memory_order_acquire) != flag)
      if (global_time_ns() - began > car::barrier_timeout_ns)
        __trap();  // a peer died or launched another kernel: fail (sticky error) rather than hang
  }
  __syncthreads();
}

template <class T>
inline constexpr int elems = car::pack_elems(static_cast<int>(sizeof(T)));

__device__ __forceinline__ uint32_t bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

// One 16-byte pack of `base` as floats (bf16: the element at the lower address is the low half of each word).
template <class T>
__device__ __forceinline__ void load_pack(const void* base, int64_t i, float (&v)[elems<T>]) {
  const uint4 p = __ldcg(static_cast<const uint4*>(base) + i);
  const uint32_t w[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (sizeof(T) == 4) {
      v[j] = __uint_as_float(w[j]);
    } else {
      v[2 * j] = __uint_as_float(w[j] << 16);
      v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
  }
}

template <class T>
__device__ __forceinline__ uint4 to_pack(const float (&v)[elems<T>]) {
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (sizeof(T) == 4)
      w[j] = __float_as_uint(v[j]);
    else
      w[j] = bf16_bits(v[2 * j]) | (bf16_bits(v[2 * j + 1]) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Pack i summed over the ranks in rank order: acc = x0, then acc += x1, ..., in f32. The order is fixed by the rank
// numbers, never by which rank runs it, so every rank gets the same bits.
template <class T>
__device__ __forceinline__ uint4 sum_pack(const car_rank_table* __restrict__ t, int world, int64_t i) {
  float acc[elems<T>];
  load_pack<T>(t->data[0], i, acc);
#pragma unroll
  for (int k = 1; k < car::max_ranks; ++k) {
    if (k < world) {
      float v[elems<T>];
      load_pack<T>(t->data[k], i, v);
#pragma unroll
      for (int j = 0; j < elems<T>; ++j)
        acc[j] += v[j];
    }
  }
  return to_pack<T>(acc);
}

template <class T>
__device__ __forceinline__ float load_one(const void* base, int64_t e) {
  if constexpr (sizeof(T) == 4)
    return __ldcg(static_cast<const float*>(base) + e);
  else
    return __uint_as_float(static_cast<uint32_t>(__ldcg(static_cast<const unsigned short*>(base) + e)) << 16);
}

// The elements after the last whole pack, one per thread of block 0, in the same order as sum_pack.
template <class T>
__device__ __forceinline__ void sum_tail(const car_rank_table* __restrict__ t, int world, int64_t n, T* out) {
  const car::index_range tail = car::tail_elems(n, static_cast<int>(sizeof(T)));
  for (int64_t e = tail.begin + threadIdx.x; e < tail.end; e += blockDim.x) {
    float acc = load_one<T>(t->data[0], e);
#pragma unroll
    for (int k = 1; k < car::max_ranks; ++k)
      if (k < world)
        acc += load_one<T>(t->data[k], e);
    if constexpr (sizeof(T) == 4)
      out[e] = acc;
    else
      out[e] = static_cast<T>(bf16_bits(acc));
  }
}

// __launch_bounds__(512, 1): with the thread count alone ptxas aimed at full occupancy (32 registers) and spilled
// in the bf16 two-shot; one block per SM is all these launches (at most 36 blocks) ever need.
template <class T>
__global__ void __launch_bounds__(car::block_threads, 1)
    one_shot_kernel(const car_rank_table* __restrict__ t, int rank, int world, int64_t n, T* __restrict__ out) {
  signal_layout* self = t->signal[rank];
  const uint32_t flag = self->counter[blockIdx.x] + 1;
  barrier<barrier_phase::start>(t, self, rank, world, flag);
  const int64_t packs = car::full_packs(n, static_cast<int>(sizeof(T)));
  const int64_t stride = car::grid_stride(static_cast<int>(gridDim.x));
  uint4* out4 = reinterpret_cast<uint4*>(out);
  for (int64_t i = car::grid_first(blockIdx.x, threadIdx.x); i < packs; i += stride)
    out4[i] = sum_pack<T>(t, world, i);
  if (blockIdx.x == 0)
    sum_tail<T>(t, world, n, out);
  barrier<barrier_phase::end>(t, self, rank, world, flag);
  if (threadIdx.x == 0)
    self->counter[blockIdx.x] = flag;
}

template <class T>
__global__ void __launch_bounds__(car::block_threads, 1)
    two_shot_kernel(const car_rank_table* __restrict__ t, int rank, int world, int64_t n, T* __restrict__ out) {
  signal_layout* self = t->signal[rank];
  const uint32_t flag = self->counter[blockIdx.x] + 1;
  barrier<barrier_phase::start>(t, self, rank, world, flag);
  const int64_t packs = car::full_packs(n, static_cast<int>(sizeof(T)));
  const int64_t stride = car::grid_stride(static_cast<int>(gridDim.x));
  const int64_t first = car::grid_first(blockIdx.x, threadIdx.x);
  // Reduce-scatter: this rank's partition of every staging buffer, summed into its own staging buffer. Nobody else
  // reads that partition of this buffer in this phase (each rank reads only its own partition everywhere).
  const car::index_range mine = car::partition(packs, world, rank);
  uint4* stage = static_cast<uint4*>(t->data[rank]);
  for (int64_t i = first; i < mine.size(); i += stride)
    stage[mine.begin + i] = sum_pack<T>(t, world, mine.begin + i);
  if (blockIdx.x == 0)
    sum_tail<T>(t, world, n, out);
  barrier<barrier_phase::mid>(t, self, rank, world, flag);
  // All-gather: partition k from rank k's staging buffer, for every k.
  // Not unrolled: the table is in device memory (any index is cheap), and unrolling 8 copy loops spills registers.
  uint4* out4 = reinterpret_cast<uint4*>(out);
#pragma unroll 1
  for (int k = 0; k < world; ++k) {
    const car::index_range part = car::partition(packs, world, k);
    const uint4* src = static_cast<const uint4*>(t->data[k]);
    for (int64_t i = first; i < part.size(); i += stride)
      out4[part.begin + i] = __ldcg(src + part.begin + i);
  }
  barrier<barrier_phase::end>(t, self, rank, world, flag);
  if (threadIdx.x == 0)
    self->counter[blockIdx.x] = flag;
}

void launch(bool two_shot, const car_rank_table* ranks, int rank, int world, int64_t n, element_type type, void* out,
            cudaStream_t stream) {
  if (world < 1 || world > car::max_ranks || rank < 0 || rank >= world)
    throw std::invalid_argument("custom all-reduce: rank " + std::to_string(rank) + " of " + std::to_string(world) +
                                " (at most " + std::to_string(car::max_ranks) + " ranks)");
  if (type == element_type::f16)
    throw std::invalid_argument("custom all-reduce: f16 is not served (f32 and bf16 are)");
  if (reinterpret_cast<uintptr_t>(out) % car::pack_bytes != 0)
    throw std::invalid_argument("custom all-reduce: the output is not 16-byte aligned");
  if (n <= 0)
    return;  // every rank has the same n, so every rank skips the launch
  const int elem_bytes = element_size(type);
  const int64_t packs = car::full_packs(n, elem_bytes);
  const int64_t items = two_shot ? car::partition(packs, world, 0).size() : packs;
  const unsigned blocks = static_cast<unsigned>(car::launch_blocks(items));
  if (type == element_type::f32) {
    if (two_shot)
      two_shot_kernel<float>
          <<<blocks, car::block_threads, 0, stream>>>(ranks, rank, world, n, static_cast<float*>(out));
    else
      one_shot_kernel<float>
          <<<blocks, car::block_threads, 0, stream>>>(ranks, rank, world, n, static_cast<float*>(out));
  } else {
    if (two_shot)
      two_shot_kernel<uint16_t>
          <<<blocks, car::block_threads, 0, stream>>>(ranks, rank, world, n, static_cast<uint16_t*>(out));
    else
      one_shot_kernel<uint16_t>
          <<<blocks, car::block_threads, 0, stream>>>(ranks, rank, world, n, static_cast<uint16_t*>(out));
  }
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void car_one_shot(const car_rank_table* ranks, int rank, int world, int64_t n, element_type type, void* out,
                  cudaStream_t stream) {
  launch(false, ranks, rank, world, n, type, out, stream);
}

void car_two_shot(const car_rank_table* ranks, int rank, int world, int64_t n, element_type type, void* out,
                  cudaStream_t stream) {
  launch(true, ranks, rank, world, n, type, out, stream);
}

}  // namespace actorllm::cuda
