// RMSNorm kernels: one block per row, a block-wide sum of squares, then the scaled row. The block's shape comes from
// row_launch_of (launch_geometry.hpp): 16-byte loads where the row allows, and enough threads that a 4096-wide row
// is read in one pass.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch_geometry.hpp"
#include "kernels/cuda/rms_norm.hpp"

#include <cstdint>

namespace actorllm::cuda {
namespace {

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
__device__ __forceinline__ void store_floats(float* dst, const float (&v)[V]) {
  if constexpr (V == 4)
    *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
  else
    *dst = v[0];
}

// residual may be null (plain RMSNorm of x), else x is the delta added into residual first and the norm reads the
// sum. The row is read twice (sum, then scale): rows are at most a few KiB, so the second read hits L1/L2, and each
// thread rereads only the elements it wrote itself.
template <class W, int V>
__global__ void __launch_bounds__(row_threads)
    rms_norm_kernel(const float* x, float* residual, int64_t width, const W* __restrict__ weight, float eps, float* y) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * width;
  float* rr = residual != nullptr ? residual + row * width : nullptr;
  float* yr = y + row * width;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * V;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x * V; i < width; i += stride) {
    float v[V];
    load_floats<V>(xr + i, v);
    if (rr != nullptr) {
      float r[V];
      load_floats<V>(rr + i, r);
#pragma unroll
      for (int k = 0; k < V; ++k)
        v[k] += r[k];
      store_floats<V>(rr + i, v);
    }
#pragma unroll
    for (int k = 0; k < V; ++k)
      sum += v[k] * v[k];
  }
  const float total = block_sum(sum);
  const float inv = 1.0f / sqrtf(total / static_cast<float>(width) + eps);  // IEEE sqrt and divide, as the CPU
  const float* src = rr != nullptr ? rr : xr;
  for (int64_t i = threadIdx.x * V; i < width; i += stride) {
    float v[V];
    load_floats<V>(src + i, v);
#pragma unroll
    for (int k = 0; k < V; ++k)
      v[k] = v[k] * inv * to_f32(weight[i + k]);
    store_floats<V>(yr + i, v);
  }
}

bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void launch(const float* x, float* residual, int64_t n_rows, int64_t width, const void* weight, element_type wtype,
            float eps, float* y, cudaStream_t stream) {
  if (n_rows <= 0 || width <= 0)
    return;
  // Rows start every width floats: with width % 4 == 0, aligned bases mean aligned rows.
  const row_launch shape =
      row_launch_of(width, aligned_16(x) && aligned_16(y) && (residual == nullptr || aligned_16(residual)));
  dispatch_element(wtype, [&](auto tag) {
    using W = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    const auto blocks = static_cast<unsigned>(n_rows);
    if (shape.vector == 4)
      rms_norm_kernel<W, 4>
          <<<blocks, shape.threads, 0, stream>>>(x, residual, width, static_cast<const W*>(weight), eps, y);
    else
      rms_norm_kernel<W, 1>
          <<<blocks, shape.threads, 0, stream>>>(x, residual, width, static_cast<const W*>(weight), eps, y);
  });
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm(const float* x, int64_t n_rows, int64_t width, const void* weight, element_type wtype, float eps,
              float* y, cudaStream_t stream) {
  launch(x, nullptr, n_rows, width, weight, wtype, eps, y, stream);
}

void add_rms_norm(float* residual, const float* delta, int64_t n_rows, int64_t width, const void* weight,
                  element_type wtype, float eps, float* out, cudaStream_t stream) {
  launch(delta, residual, n_rows, width, weight, wtype, eps, out, stream);
}

}  // namespace actorllm::cuda
