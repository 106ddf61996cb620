// The index arithmetic and the signal layout of the custom all-reduce (comm/cuda/custom_all_reduce_kernels.cu),
// as __host__ __device__ functions the kernels call and tests/kernels/cuda/custom_all_reduce_math_test.cpp runs on the
// CPU: 16-byte packs and the element tail after them, the two-shot partition of the packs over the ranks, the grid, and
// the flags of the barriers. A C++17 header (nvcc compiles the .cu files as C++17).
#pragma once

#include <cstdint>

#include "kernels/cuda/host_device.hpp"

namespace actorllm::cuda::car {

/// Most ranks a group may have (an NVLink node of 8; the signal layout has a slot per rank).
inline constexpr int max_ranks = 8;
/// Threads per block.
inline constexpr int block_threads = 512;
/// Most blocks per launch (vLLM's default of 36: enough to saturate NVLink reads on an H100 while leaving SMs to
/// whatever runs beside; more blocks mean more barrier flags to write).
inline constexpr int max_launch_blocks = 36;
/// Blocks the signal layout has slots for (a launch never uses more than max_launch_blocks of them).
inline constexpr int signal_blocks = 64;
/// Bytes one thread loads from each rank per step (one uint4).
inline constexpr int pack_bytes = 16;
/// A barrier that waits longer than this traps (the kernel fails with an error the host sees at its next sync)
/// rather than hanging forever on a peer that died: 10 s is far above any message's time, also with two processes
/// time-sliced on one GPU.
inline constexpr uint64_t barrier_timeout_ns = 10'000'000'000ull;

/// One rank's signal buffer. The barrier between ranks is per block: block b of rank k writes `flag` into
/// start[b][k] (then mid, then end) of every rank's buffer, and block b of every rank waits until all of its own
/// start[b][0..world) hold `flag`. `counter[b]` is the flag block b last used, read and written only by this rank;
/// each call's flag is counter + 1, so flags never need resetting and a slot written for the next call cannot be
/// mistaken for this one's (a peer reaches the next call's start only after this rank passed this call's end).
/// Zeroed once before the handshake.
struct signal_layout {
  uint32_t start[signal_blocks][max_ranks];
  uint32_t mid[signal_blocks][max_ranks];
  uint32_t end[signal_blocks][max_ranks];
  uint32_t counter[signal_blocks];
};

/// A half-open range [begin, end).
struct index_range {
  int64_t begin = 0;
  int64_t end = 0;
  ACTORLLM_HOST_DEVICE constexpr int64_t size() const { return end - begin; }
};

/// Elements of `elem_bytes` per 16-byte pack (4 f32, 8 bf16).
ACTORLLM_HOST_DEVICE constexpr int pack_elems(int elem_bytes) { return pack_bytes / elem_bytes; }

/// Whole packs in a message of n elements: the kernels load these 16 bytes at a time.
ACTORLLM_HOST_DEVICE constexpr int64_t full_packs(int64_t n, int elem_bytes) { return n / pack_elems(elem_bytes); }

/// The elements after the whole packs (fewer than one pack), which block 0 sums one by one.
ACTORLLM_HOST_DEVICE constexpr index_range tail_elems(int64_t n, int elem_bytes) {
  return {full_packs(n, elem_bytes) * pack_elems(elem_bytes), n};
}

/// Rank `rank`'s share of n items in the two-shot reduce-scatter: consecutive ranges in rank order, the first
/// n % world ranks one item more. Every item in exactly one range; a rank may get none when n < world.
ACTORLLM_HOST_DEVICE constexpr index_range partition(int64_t n, int world, int rank) {
  const int64_t base = n / world;
  const int64_t extra = n % world;
  const int64_t begin = rank * base + (rank < extra ? rank : extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

/// Blocks of a launch for `items` packs per rank (one-shot: all of them; two-shot: the largest partition): enough
/// for one pack per thread, at most max_launch_blocks, at least one (block 0 also sums the tail and every block
/// passes the barriers). The same on every rank for the same message: the per-block barriers pair block b with
/// block b.
ACTORLLM_HOST_DEVICE constexpr int launch_blocks(int64_t items) {
  const int64_t wanted = (items + block_threads - 1) / block_threads;
  return wanted < 1 ? 1 : (wanted > max_launch_blocks ? max_launch_blocks : static_cast<int>(wanted));
}

/// The first item thread `thread` of block `block` handles in a grid-stride loop; it then steps by
/// grid_stride(blocks). The two-shot's per-block barrier is enough because the mapping depends only on the index
/// within a partition: block b of rank k gathers, from partition j, exactly the items block b of rank j reduced.
ACTORLLM_HOST_DEVICE constexpr int64_t grid_first(int block, int thread) {
  return static_cast<int64_t>(block) * block_threads + thread;
}
ACTORLLM_HOST_DEVICE constexpr int64_t grid_stride(int blocks) { return static_cast<int64_t>(blocks) * block_threads; }

}  // namespace actorllm::cuda::car
