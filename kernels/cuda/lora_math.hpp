// The arithmetic of the batched LoRA kernels (lora.cu) as __host__ __device__ functions: which adapter a row reads
// (the device-side slot guard), one thread's share of a shrink dot product, the expand dot product of one output,
// and the launch shapes. The kernels call exactly these, and tests/kernels/cuda/lora_math_test.cpp runs them in the
// kernels' loop structure on the CPU against a float64 reference. A C++17 header (nvcc compiles the .cu files as
// C++17).
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels/cuda/host_device.hpp"

namespace actorllm::cuda::lora {

/// Threads of a shrink block (one block per (row, rank) pair) at most and at least.
inline constexpr int max_shrink_threads = 256;
inline constexpr int min_shrink_threads = 32;
/// 16-byte loads each shrink thread makes per operand, at least, before the block grows past min_shrink_threads: a
/// few independent loads in flight per thread, and at n_in 2048 a block of 128 threads.
inline constexpr int shrink_loads_per_thread = 4;
/// Threads of an expand block (one output each); blocks tile the outputs of one row.
inline constexpr int expand_threads = 256;
/// Most expand blocks per row (gridDim.y's limit); a longer row is walked by a grid-stride loop.
inline constexpr int64_t max_expand_blocks = 65535;

/// The adapter slot row t reads, or -1 for none: a negative slot, and also one at or past n_slots. The CPU backend
/// checks the slots on the host and refuses a bad one; the device cannot without a synchronisation, so a row naming
/// a slot outside the stack is skipped (y and shrunk untouched) instead of reading past a and b.
ACTORLLM_HOST_DEVICE inline int32_t row_slot(const int32_t* row_slots, int64_t t, int64_t n_slots) {
  const int32_t s = row_slots[t];
  return s >= 0 && s < n_slots ? s : -1;
}

/// Floats per load of a kernel whose rows are `width` floats: 4 (16-byte loads) when every row starts 16-byte
/// aligned, which needs aligned bases and a width that is a multiple of 4; else 1.
ACTORLLM_HOST_DEVICE constexpr int vector_of(int64_t width, bool bases_aligned_16) {
  return bases_aligned_16 && width % 4 == 0 ? 4 : 1;
}

/// Threads of the shrink block for rows of n_in floats loaded `vector` at a time: a multiple of 32 in
/// [min_shrink_threads, max_shrink_threads], about shrink_loads_per_thread loads per thread.
ACTORLLM_HOST_DEVICE constexpr int shrink_threads(int64_t n_in, int vector) {
  const int64_t loads = (n_in + vector - 1) / vector;
  const int64_t wanted = (loads + shrink_loads_per_thread - 1) / shrink_loads_per_thread;
  const int64_t rounded = (wanted + 31) / 32 * 32;
  return rounded < min_shrink_threads   ? min_shrink_threads
         : rounded > max_shrink_threads ? max_shrink_threads
                                        : static_cast<int>(rounded);
}

/// Expand blocks per row for n_out outputs.
ACTORLLM_HOST_DEVICE constexpr int64_t expand_blocks(int64_t n_out) {
  const int64_t blocks = (n_out + expand_threads - 1) / expand_threads;
  return blocks < max_expand_blocks ? blocks : max_expand_blocks;
}

/// V consecutive floats from p (one 16-byte load on the device when V is 4: p must then be 16-byte aligned).
template <int V>
ACTORLLM_HOST_DEVICE inline void load_floats(const float* p, float (&v)[V]) {
#ifdef __CUDA_ARCH__
  if constexpr (V == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
  } else {
    for (int k = 0; k < V; ++k)
      v[k] = p[k];
  }
#else
  for (int k = 0; k < V; ++k)
    v[k] = p[k];
#endif
}

/// Thread `thread` of `n_threads`' part of the shrink dot product a_row . x_row (n_in floats): the V-float pieces
/// starting at V (thread + k n_threads), k = 0, 1, ..., each element one fmaf into a single f32 sum in order. The
/// block then adds its threads' parts with device_math.cuh's block_sum. V = 4 needs n_in % 4 == 0 (vector_of).
template <int V>
ACTORLLM_HOST_DEVICE inline float shrink_partial(const float* a_row, const float* x_row, int64_t n_in, int thread,
                                                 int n_threads) {
  float acc = 0.0f;
  for (int64_t i = int64_t{thread} * V; i < n_in; i += int64_t{n_threads} * V) {
    float av[V], xv[V];
    load_floats<V>(a_row + i, av);
    load_floats<V>(x_row + i, xv);
    for (int k = 0; k < V; ++k)
      acc = fmaf(av[k], xv[k], acc);
  }
  return acc;
}

/// The expand dot product of one output: sum over r < rank of b_row[r] * shrunk_row[r], one fmaf per r in order
/// (the same sum for either V; V = 4 needs rank % 4 == 0 and aligned rows, see vector_of).
template <int V>
ACTORLLM_HOST_DEVICE inline float expand_dot(const float* b_row, const float* shrunk_row, int64_t rank) {
  float acc = 0.0f;
  for (int64_t r = 0; r < rank; r += V) {
    float bv[V], sv[V];
    load_floats<V>(b_row + r, bv);
    load_floats<V>(shrunk_row + r, sv);
    for (int k = 0; k < V; ++k)
      acc = fmaf(bv[k], sv[k], acc);
  }
  return acc;
}

}  // namespace actorllm::cuda::lora
