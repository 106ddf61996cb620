// RMSNorm kernels: one block per row, a block-wide sum of squares, then the scaled row.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch_geometry.hpp"
#include "kernels/cuda/rms_norm.hpp"

namespace actorllm::cuda {
namespace {

// residual may be null (plain RMSNorm of x), else x is the delta added into residual first and the norm reads the
// sum. The row is read twice (sum, then scale): rows are at most a few KiB, so the second read hits L1/L2.
template <class W>
__global__ void __launch_bounds__(row_threads)
    rms_norm_kernel(const float* __restrict__ x, float* residual, int64_t width, const W* __restrict__ weight,
                    float eps, float* y) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * width;
  float* rr = residual != nullptr ? residual + row * width : nullptr;
  float* yr = y + row * width;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    float v = xr[i];
    if (rr != nullptr) {
      v += rr[i];
      rr[i] = v;
    }
    sum += v * v;
  }
  const float total = block_sum(sum);
  const float inv = 1.0f / sqrtf(total / static_cast<float>(width) + eps);  // IEEE sqrt and divide, as the CPU
  const float* src = rr != nullptr ? rr : xr;  // each thread rereads only the elements it wrote itself
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    yr[i] = src[i] * inv * to_f32(weight[i]);
}

void launch(const float* x, float* residual, int64_t n_rows, int64_t width, const void* weight, element_type wtype,
            float eps, float* y, cudaStream_t stream) {
  if (n_rows <= 0 || width <= 0)
    return;
  dispatch_element(wtype, [&](auto tag) {
    using W = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    rms_norm_kernel<W><<<static_cast<unsigned>(n_rows), row_threads, 0, stream>>>(
        x, residual, width, static_cast<const W*>(weight), eps, y);
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
