// The CUDA kernels against the CPU reference backend. Where no GPU is visible (as in CI) the cases that need one
// are skipped through doctest's skip decorator, so the run counts them as skipped (not passed), and a listener
// (gpu_skip_listener.cpp) prints "skipped: no GPU" with the driver's reason for each.
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/norm_activation.hpp"

#include "gpu_test_util.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <ostream>
#include <random>
#include <vector>

namespace {

using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::require_gpu;
using device_buffer = actorllm::cuda_test::device_array<float>;

std::vector<float> random_vector(size_t n, uint32_t seed) {
  std::mt19937 gen{seed};
  std::uniform_real_distribution<float> dist{-2.0f, 2.0f};
  std::vector<float> v(n);
  for (auto& x : v)
    x = dist(gen);
  return v;
}

}  // namespace

TEST_CASE("cuda rms_norm matches the CPU reference" * doctest::skip(!gpu_available())) {
  require_gpu();
  const int64_t n_tokens = 7, n_embd = 2048 + 3;
  auto x = random_vector(static_cast<size_t>(n_tokens * n_embd), 1);
  auto w = random_vector(static_cast<size_t>(n_embd), 2);
  std::vector<float> expect(x.size()), got(x.size());
  actorllm::cpu::rms_norm(x.data(), n_tokens, n_embd, w.data(), actorllm::dtype::f32, 1e-5f, expect.data());
  device_buffer dx{x.size()}, dw{w.size()}, dy{x.size()};
  ACTORLLM_CUDA_CHECK(cudaMemcpy(dx.ptr, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  ACTORLLM_CUDA_CHECK(cudaMemcpy(dw.ptr, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
  actorllm::cuda::rms_norm(dx.ptr, n_tokens, n_embd, dw.ptr, 1e-5f, dy.ptr);
  ACTORLLM_CUDA_CHECK(cudaMemcpy(got.data(), dy.ptr, got.size() * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < got.size(); ++i)
    REQUIRE(std::fabs(got[i] - expect[i]) <= 1e-5f + 1e-4f * std::fabs(expect[i]));
}

TEST_CASE("cuda silu_mul matches the CPU reference" * doctest::skip(!gpu_available())) {
  require_gpu();
  const int64_t n = 100003;
  auto g = random_vector(static_cast<size_t>(n), 3);
  auto u = random_vector(static_cast<size_t>(n), 4);
  std::vector<float> expect(g.size()), got(g.size());
  actorllm::cpu::silu_mul(g.data(), u.data(), n, expect.data());
  device_buffer dg{g.size()}, du{u.size()}, dy{g.size()};
  ACTORLLM_CUDA_CHECK(cudaMemcpy(dg.ptr, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
  ACTORLLM_CUDA_CHECK(cudaMemcpy(du.ptr, u.data(), u.size() * 4, cudaMemcpyHostToDevice));
  actorllm::cuda::silu_mul(dg.ptr, du.ptr, n, dy.ptr);
  ACTORLLM_CUDA_CHECK(cudaMemcpy(got.data(), dy.ptr, got.size() * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < got.size(); ++i)
    REQUIRE(std::fabs(got[i] - expect[i]) <= 1e-5f + 1e-4f * std::fabs(expect[i]));
}

TEST_CASE("cuda device query never fails without a GPU") {
  int n = actorllm::cuda::device_count();
  CHECK(n >= 0);
  CHECK(actorllm::cuda::devices().size() == static_cast<size_t>(n));
  if (n == 0)
    CHECK(!actorllm::cuda::unavailable_reason().empty());
}
