// Elementwise kernels: grid-stride loops over flat indices (launch_geometry.hpp sizes the grids).
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/launch_geometry.hpp"
#include "kernels/cuda/stacked_math.hpp"

#include <stdexcept>
#include <string>
#include <type_traits>

namespace actorllm::cuda {
namespace {

__device__ __forceinline__ int64_t first_index() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Out: float, or __nv_bfloat16 for the GEMM that reads the product (rounded once).
template <class Out>
__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, Out* out) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float g = gate[i];
    out[i] = from_f32<Out>(g * up[i] / (1.0f + expf(-g)));  // the CPU's order of operations; expf, not __expf
  }
}

template <class Out>
__global__ void silu_mul_stacked_kernel(const float* __restrict__ gate_up, int64_t n, int64_t n_ff,
                                        Out* __restrict__ out) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    out[i] = from_f32<Out>(silu_stacked::at(gate_up, n_ff, i));
}

__global__ void split_columns_kernel(const float* __restrict__ src, int64_t n, int64_t src_width, split::parts p) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const split::target t = split::locate(p, src_width, i);
    split::destination(p, t.part)[t.index] = src[t.src];
  }
}

__global__ void add_kernel(const float* a, const float* b, int64_t n, int64_t b_n, float* out) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    out[i] = a[i] + b[b_n == n ? i : i % b_n];
}

__global__ void gather_rows_kernel(const float* __restrict__ x, int64_t n_rows, int64_t width,
                                   const int32_t* __restrict__ rows, int64_t m, float* __restrict__ out) {
  const int64_t n = m * width;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t r = i / width, c = i % width;
    const int32_t src = rows[r];
    out[i] = src >= 0 && src < n_rows ? x[src * width + c] : 0.0f;
  }
}

template <class T>
__global__ void convert_kernel(const float* __restrict__ src, int64_t n, T* __restrict__ dst) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    dst[i] = from_f32<T>(src[i]);
}

template <class T>
__global__ void embedding_kernel(const int32_t* __restrict__ ids, int64_t n_tokens, const T* __restrict__ table,
                                 int64_t row_begin, int64_t n_rows, int64_t n_embd, float* __restrict__ out) {
  const int64_t n = n_tokens * n_embd;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t t = i / n_embd, c = i % n_embd;
    const int64_t row = static_cast<int64_t>(ids[t]) - row_begin;
    out[i] = row >= 0 && row < n_rows ? to_f32(table[row * n_embd + c]) : 0.0f;
  }
}

}  // namespace

namespace {

// Calls launch with out as the pointer type out_type names (f32 or bf16; anything else is refused, naming op).
template <class F>
void with_f32_or_bf16(void* out, element_type out_type, const char* op, F&& launch) {
  if (out_type == element_type::bf16)
    launch(static_cast<__nv_bfloat16*>(out));
  else if (out_type == element_type::f32)
    launch(static_cast<float*>(out));
  else
    throw std::invalid_argument(std::string{op} + ": the output is f32 or bf16");
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void silu_mul(const float* gate, const float* up, int64_t n, void* out, element_type out_type, cudaStream_t stream) {
  const grid_1d g = elementwise_grid(n);
  if (g.blocks == 0)
    return;
  with_f32_or_bf16(out, out_type, "silu_mul",
                   [&](auto* o) { silu_mul_kernel<<<g.blocks, g.threads, 0, stream>>>(gate, up, n, o); });
}

void silu_mul_stacked(const float* gate_up, int64_t n_rows, int64_t n_ff, void* out, element_type out_type,
                      cudaStream_t stream) {
  const int64_t n = n_rows * n_ff;
  const grid_1d g = elementwise_grid(n);
  if (g.blocks == 0)
    return;
  with_f32_or_bf16(out, out_type, "silu_mul_stacked",
                   [&](auto* o) { silu_mul_stacked_kernel<<<g.blocks, g.threads, 0, stream>>>(gate_up, n, n_ff, o); });
}

void split_columns(const float* src, int64_t n_rows, int64_t src_width, const split::parts& p, cudaStream_t stream) {
  const int64_t n = n_rows * p.total;
  const grid_1d g = elementwise_grid(n);
  if (g.blocks == 0)
    return;
  split_columns_kernel<<<g.blocks, g.threads, 0, stream>>>(src, n, src_width, p);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

void add(const float* a, const float* b, int64_t n, int64_t b_n, float* out, cudaStream_t stream) {
  const grid_1d g = elementwise_grid(n);
  if (g.blocks == 0 || b_n <= 0)
    return;
  add_kernel<<<g.blocks, g.threads, 0, stream>>>(a, b, n, b_n, out);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

void gather_rows(const float* x, int64_t n_rows, int64_t width, const int32_t* rows, int64_t m, float* out,
                 cudaStream_t stream) {
  const grid_1d g = elementwise_grid(m * width);
  if (g.blocks == 0)
    return;
  gather_rows_kernel<<<g.blocks, g.threads, 0, stream>>>(x, n_rows, width, rows, m, out);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

void convert_from_f32(const float* src, int64_t n, void* dst, element_type type, cudaStream_t stream) {
  const grid_1d g = elementwise_grid(n);
  if (g.blocks == 0)
    return;
  dispatch_element(type, [&](auto tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    convert_kernel<T><<<g.blocks, g.threads, 0, stream>>>(src, n, static_cast<T*>(dst));
  });
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

void embedding(const int32_t* ids, int64_t n_tokens, const void* table, element_type ttype, int64_t row_begin,
               int64_t n_rows, int64_t n_embd, float* out, cudaStream_t stream) {
  const grid_1d g = elementwise_grid(n_tokens * n_embd);
  if (g.blocks == 0)
    return;
  dispatch_element(ttype, [&](auto tag) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    embedding_kernel<T><<<g.blocks, g.threads, 0, stream>>>(ids, n_tokens, static_cast<const T*>(table), row_begin,
                                                            n_rows, n_embd, out);
  });
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace actorllm::cuda
