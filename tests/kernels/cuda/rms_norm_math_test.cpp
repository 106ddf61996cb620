// The CUDA RMSNorm's math on the CPU, no GPU needed (kernels/cuda/rms_norm_math.hpp, which rms_norm.cu runs): a block
// of row_launch_of's threads emulated (their element split, fma sums of squares, the block_sum tree, the scaling)
// against float64 for model widths (one pass in registers, several, and rows wider than the register cache), the
// residual add, the geometry's cached passes, and the block_sum tree against a plain sum of exact values.
// rms_norm_gpu_test.cpp holds the device to this emulation bit for bit.
#include "kernels/cuda/rms_norm_math.hpp"
#include "kernels/cuda/launch_geometry.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace actorllm::cuda;

}  // namespace

TEST_CASE("rms_norm math: the geometry keeps up to four passes in registers") {
  CHECK(row_launch_of(4096, true).cached_passes == 1);  // Llama 8B: 1024 threads, one float4 each
  CHECK(row_launch_of(8192, true).cached_passes == 2);
  CHECK(row_launch_of(16384, true).cached_passes == 4);
  CHECK(row_launch_of(16388, true).cached_passes == 0);  // five passes: reread
  CHECK(row_launch_of(4098, true).cached_passes == 0);   // scalar loads (4098 % 4 != 0): 5 passes of 1024
  CHECK(row_launch_of(64, true).cached_passes == 1);     // stories260K: one warp, 16 float4
}

TEST_CASE("rms_norm math: the block_sum tree adds every thread's partial once") {
  for (int threads : {32, 64, 96, 1024}) {
    std::vector<float> partial(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t)
      partial[static_cast<size_t>(t)] = static_cast<float>(t + 1);  // small integers: every order sums exactly
    CHECK(norm::emulate_block_sum(partial) == static_cast<float>(threads * (threads + 1) / 2));
  }
}

TEST_CASE("rms_norm math: the emulated block against float64, with and without the residual add") {
  std::mt19937 gen(77);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const int64_t width :
       {int64_t{64}, int64_t{288}, int64_t{4096}, int64_t{5120}, int64_t{8192}, int64_t{20480}, int64_t{4098}}) {
    for (const bool add : {false, true}) {
      CAPTURE(width);
      CAPTURE(add);
      const row_launch shape = row_launch_of(width, true);
      std::vector<float> residual(static_cast<size_t>(width)), delta(residual.size()), weight(residual.size()),
          out(residual.size());
      for (size_t i = 0; i < residual.size(); ++i) {
        residual[i] = d(gen) * 3.0f;
        delta[i] = d(gen);
        weight[i] = 1.0f + 0.1f * d(gen);
      }
      std::vector<double> sum(residual.size());
      for (size_t i = 0; i < residual.size(); ++i)  // the f32 sum the kernel reads (one rounding, as the kernel's)
        sum[i] = add ? static_cast<double>(delta[i] + residual[i]) : residual[i];
      const float eps = 1e-5f;
      std::vector<float> res = residual;
      norm::emulate_row(res.data(), add ? delta.data() : nullptr, width, weight.data(), eps,
                        static_cast<int>(shape.threads), shape.vector, out.data());
      double ms = 0.0;
      for (double v : sum)
        ms += v * v;
      const double inv = 1.0 / std::sqrt(ms / static_cast<double>(width) + eps);
      for (size_t i = 0; i < residual.size(); ++i) {
        REQUIRE(res[i] == static_cast<float>(sum[i]));
        const double want = sum[i] * inv * weight[i];
        // Sum of squares: depth ~ passes + 10 tree levels of f32 rounding; then sqrt, divide and two multiplies.
        const double tol = 1e-5 * std::fabs(sum[i] * inv * weight[i]) + 1e-7;
        if (std::fabs(out[i] - want) > tol) {
          FAIL_CHECK("element " << i << ": " << out[i] << " vs " << want);
          break;
        }
      }
    }
  }
}
