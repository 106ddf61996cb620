// The CUDA RMSNorm kernels (kernels/cuda/rms_norm.cu) held to their CPU emulation (rms_norm_math.hpp) bit for bit:
// add_rms_norm and rms_norm at batch 1 and 5 over widths in one register pass, several, and past the register cache,
// aligned (16-byte loads) and not, writing f32 and bf16 (the emulated value rounded once). Skipped ("skipped: no
// GPU") where there is none; the emulation is checked against float64 in rms_norm_math_test.cpp.
#include "kernels/cuda/launch_geometry.hpp"
#include "kernels/cuda/rms_norm.hpp"
#include "kernels/cuda/rms_norm_math.hpp"
#include "kernels/dtype.hpp"

#include "gpu_test_util.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace actorllm;
using actorllm::cuda_test::device_array;
using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::require_gpu;

}  // namespace

TEST_CASE("cuda rms_norm: add_rms_norm and rms_norm equal the CPU emulation bit for bit, f32 and bf16 out" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  std::mt19937 gen(2033);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const int64_t width : {int64_t{64}, int64_t{4096}, int64_t{8192}, int64_t{20480}, int64_t{4098}}) {
    for (const int64_t rows : {int64_t{1}, int64_t{5}}) {
      for (const bool add : {false, true}) {
        for (const bool bf16_out : {false, true}) {
          CAPTURE(width);
          CAPTURE(rows);
          CAPTURE(add);
          CAPTURE(bf16_out);
          const auto n = static_cast<size_t>(rows * width);
          std::vector<float> residual(n), delta(n), weight(static_cast<size_t>(width));
          for (size_t i = 0; i < n; ++i) {
            residual[i] = 2.0f * d(gen);
            delta[i] = d(gen);
          }
          for (float& w : weight)
            w = 1.0f + 0.1f * d(gen);
          device_array<float> dres(residual), ddelta(delta), dw(weight), dout(n);
          device_array<uint16_t> dout_bf16(n);
          void* out = bf16_out ? static_cast<void*>(dout_bf16.ptr) : static_cast<void*>(dout.ptr);
          const cuda::element_type out_type = bf16_out ? cuda::element_type::bf16 : cuda::element_type::f32;
          if (add)
            cuda::add_rms_norm(dres.ptr, ddelta.ptr, rows, width, dw.ptr, cuda::element_type::f32, 1e-5f, out, out_type,
                               nullptr);
          else
            cuda::rms_norm(dres.ptr, rows, width, dw.ptr, cuda::element_type::f32, 1e-5f, out, out_type, nullptr);
          ACTORLLM_CUDA_CHECK(cudaDeviceSynchronize());
          const cuda::row_launch shape = cuda::row_launch_of(width, width % 4 == 0);
          std::vector<float> want(n);
          for (int64_t r = 0; r < rows; ++r)
            cuda::norm::emulate_row(residual.data() + r * width, add ? delta.data() + r * width : nullptr, width,
                                    weight.data(), 1e-5f, static_cast<int>(shape.threads), shape.vector,
                                    want.data() + r * width);
          CHECK(dres.to_host() == residual);  // the updated residual (unchanged for rms_norm)
          const std::vector<float> got_f32 = bf16_out ? std::vector<float>{} : dout.to_host();
          const std::vector<uint16_t> got_bf16 = bf16_out ? dout_bf16.to_host() : std::vector<uint16_t>{};
          for (size_t i = 0; i < n; ++i) {
            const bool same = bf16_out ? got_bf16[i] == f32_to_bf16(want[i]) : got_f32[i] == want[i];
            if (!same) {
              FAIL_CHECK("element " << i << ": emulated " << want[i]);
              break;
            }
          }
        }
      }
    }
  }
}
