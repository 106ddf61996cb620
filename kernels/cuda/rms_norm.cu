// RMSNorm kernels: one block per row, a block-wide sum of squares, then the scaled row, written as f32 or as bf16 for
// the GEMM that reads it. The block's shape comes from row_launch_of (launch_geometry.hpp): 16-byte loads where the
// row allows, and enough threads (up to 1024) that a 4096-wide row is read in one pass with every load in flight.
// Rows of up to norm::max_cached_passes passes keep their values in registers between the sum and the scaling (no
// second read). The arithmetic is rms_norm_math.hpp's, which the CPU test emulates.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch_geometry.hpp"
#include "kernels/cuda/rms_norm.hpp"
#include "kernels/cuda/rms_norm_math.hpp"

#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace actorllm::cuda {
namespace {

using namespace norm;

static_assert(max_cached_passes == row_cached_passes_max, "the geometry and the kernel agree on the cached passes");

template <int V>
__device__ __forceinline__ void load_floats(const float* src, float (&v)[V]) {
  if constexpr (V == 4) {
    const float4 f = *reinterpret_cast<const float4*>(src);
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
  } else {
    v[0] = *src;
  }
}

template <int V>
__device__ __forceinline__ void store_values(float* dst, const float (&v)[V]) {
  if constexpr (V == 4)
    *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
  else
    *dst = v[0];
}

template <int V>
__device__ __forceinline__ void store_values(__nv_bfloat16* dst, const float (&v)[V]) {
  if constexpr (V == 4) {  // 8 bytes: rows of width % 4 == 0 from a 16-byte aligned base stay 8-byte aligned
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(dst) = packed;
  } else {
    *dst = __float2bfloat16_rn(v[0]);
  }
}

// residual may be null (plain RMSNorm of x), else x is the delta added into residual first and the norm reads the
// sum. Cached > 0: the row takes at most Cached passes, whose values stay in registers; 0: any width, the second
// pass rereads what this thread wrote (from L1/L2).
template <class W, class Out, int V, int Cached>
__global__ void __launch_bounds__(row_threads)
    rms_norm_kernel(const float* x, float* residual, int64_t width, const W* __restrict__ weight, float eps, Out* y) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * width;
  float* rr = residual != nullptr ? residual + row * width : nullptr;
  Out* yr = y + row * width;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * V;
  constexpr int slots = Cached > 0 ? Cached : 1;
  float held[slots][V];
  float sum = 0.0f;
  const auto sum_pass = [&](int64_t i, float(&v)[V]) {
    load_floats<V>(xr + i, v);
    if (rr != nullptr) {
      float r[V];
      load_floats<V>(rr + i, r);
#pragma unroll
      for (int k = 0; k < V; ++k)
        v[k] += r[k];
      store_values<V>(rr + i, v);
    }
#pragma unroll
    for (int k = 0; k < V; ++k)
      sum = fold_square(v[k], sum);
  };
  const auto scale_pass = [&](int64_t i, float(&v)[V], float inv) {
#pragma unroll
    for (int k = 0; k < V; ++k)
      v[k] = scaled(v[k], inv, to_f32(weight[i + k]));
    store_values<V>(yr + i, v);
  };
  const int64_t first = threadIdx.x * static_cast<int64_t>(V);
  if constexpr (Cached > 0) {
#pragma unroll
    for (int p = 0; p < Cached; ++p)
      if (first + p * stride < width)
        sum_pass(first + p * stride, held[p]);
  } else {
    for (int64_t i = first; i < width; i += stride)
      sum_pass(i, held[0]);
  }
  const float inv = inverse_rms(block_sum(sum), width, eps);
  if constexpr (Cached > 0) {
#pragma unroll
    for (int p = 0; p < Cached; ++p)
      if (first + p * stride < width)
        scale_pass(first + p * stride, held[p], inv);
  } else {
    const float* src = rr != nullptr ? rr : xr;
    for (int64_t i = first; i < width; i += stride) {
      load_floats<V>(src + i, held[0]);
      scale_pass(i, held[0], inv);
    }
  }
}

bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class W, class Out, int V>
void launch_cached(const row_launch& shape, unsigned blocks, const float* x, float* residual, int64_t width,
                   const W* weight, float eps, Out* y, cudaStream_t stream) {
  switch (shape.cached_passes) {
    case 1:
      rms_norm_kernel<W, Out, V, 1><<<blocks, shape.threads, 0, stream>>>(x, residual, width, weight, eps, y);
      break;
    case 2:
      rms_norm_kernel<W, Out, V, 2><<<blocks, shape.threads, 0, stream>>>(x, residual, width, weight, eps, y);
      break;
    case 3:
    case 4:
      rms_norm_kernel<W, Out, V, 4><<<blocks, shape.threads, 0, stream>>>(x, residual, width, weight, eps, y);
      break;
    default:
      rms_norm_kernel<W, Out, V, 0><<<blocks, shape.threads, 0, stream>>>(x, residual, width, weight, eps, y);
  }
}

void launch(const float* x, float* residual, int64_t n_rows, int64_t width, const void* weight, element_type wtype,
            float eps, void* y, element_type ytype, cudaStream_t stream) {
  if (n_rows <= 0 || width <= 0)
    return;
  if (ytype == element_type::f16)
    throw std::invalid_argument("rms_norm: the output is f32 or bf16");
  // Rows start every width floats: with width % 4 == 0, aligned bases mean aligned rows.
  const row_launch shape =
      row_launch_of(width, aligned_16(x) && aligned_16(y) && (residual == nullptr || aligned_16(residual)));
  dispatch_element(wtype, [&](auto tag) {
    using W = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    const auto blocks = static_cast<unsigned>(n_rows);
    const auto* w = static_cast<const W*>(weight);
    if (ytype == element_type::bf16) {
      auto* out = static_cast<__nv_bfloat16*>(y);
      if (shape.vector == 4)
        launch_cached<W, __nv_bfloat16, 4>(shape, blocks, x, residual, width, w, eps, out, stream);
      else
        launch_cached<W, __nv_bfloat16, 1>(shape, blocks, x, residual, width, w, eps, out, stream);
    } else {
      auto* out = static_cast<float*>(y);
      if (shape.vector == 4)
        launch_cached<W, float, 4>(shape, blocks, x, residual, width, w, eps, out, stream);
      else
        launch_cached<W, float, 1>(shape, blocks, x, residual, width, w, eps, out, stream);
    }
  });
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm(const float* x, int64_t n_rows, int64_t width, const void* weight, element_type wtype, float eps, void* y,
              element_type ytype, cudaStream_t stream) {
  launch(x, nullptr, n_rows, width, weight, wtype, eps, y, ytype, stream);
}

void add_rms_norm(float* residual, const float* delta, int64_t n_rows, int64_t width, const void* weight,
                  element_type wtype, float eps, void* out, element_type out_type, cudaStream_t stream) {
  launch(delta, residual, n_rows, width, weight, wtype, eps, out, out_type, stream);
}

}  // namespace actorllm::cuda
