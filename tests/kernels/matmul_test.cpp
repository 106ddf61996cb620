// matmul parity against a float64 reference: both algorithms (GEMV, GEMM) and the automatic choice, every weight
// dtype, odd shapes that are not multiples of the vector width or of the blocking, with and without bias.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/matmul.hpp"

using namespace actorllm;

namespace {

struct shape {
  int64_t n_tokens, n_in, n_out;
};

void check_matmul(const shape& s, dtype wt, bool with_bias, cpu::matmul_path path, thread_pool& pool, uint64_t seed) {
  auto x = test::random_floats(static_cast<size_t>(s.n_tokens * s.n_in), seed);
  auto w_values = test::random_floats(static_cast<size_t>(s.n_out * s.n_in), seed + 1);
  auto w = test::to_dtype(w_values, wt);
  auto bias = test::random_floats(static_cast<size_t>(s.n_out), seed + 2);

  // Sentinels after the output catch writes past [n_tokens, n_out].
  const size_t n_y = static_cast<size_t>(s.n_tokens * s.n_out);
  std::vector<float> y(n_y + 37, -777.0f);
  cpu::matmul(x.data(), s.n_tokens, s.n_in, w.data(), wt, s.n_out, with_bias ? bias.data() : nullptr, y.data(), pool,
              path);

  std::vector<double> ref(n_y), tol(n_y);
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    for (int64_t o = 0; o < s.n_out; ++o) {
      double acc = with_bias ? bias[static_cast<size_t>(o)] : 0.0, mag = std::fabs(acc);
      for (int64_t i = 0; i < s.n_in; ++i) {
        double p = static_cast<double>(x[static_cast<size_t>(t * s.n_in + i)]) *
                   test::element(w, wt, static_cast<size_t>(o * s.n_in + i));
        acc += p;
        mag += std::fabs(p);
      }
      ref[static_cast<size_t>(t * s.n_out + o)] = acc;
      // f32 accumulation error grows with the sum of magnitudes, not with |ref| (cancellation).
      tol[static_cast<size_t>(t * s.n_out + o)] = 1e-6 + 4e-6 * mag;
    }
  }
  std::string what = "matmul " + std::to_string(s.n_tokens) + "x" + std::to_string(s.n_in) + " -> " +
                     std::to_string(s.n_out) + " " + std::string(dtype_name(wt)) + (with_bias ? " +bias" : "") +
                     " path " + std::to_string(static_cast<int>(path)) + " threads " + std::to_string(pool.size());
  test::check_close(y.data(), ref.data(), n_y, tol.data(), 0.0, 1e-6, what);
  for (size_t i = n_y; i < y.size(); ++i)
    REQUIRE(y[i] == -777.0f);
}

const std::vector<shape> small_shapes = {
    {1, 1, 1},  {1, 7, 5},    {1, 32, 16}, {1, 33, 17},  {2, 64, 40},  {3, 100, 37},
    {4, 5, 70}, {5, 129, 33}, {9, 31, 65}, {13, 300, 9}, {17, 47, 31}, {1, 600, 3},
};

}  // namespace

TEST_CASE("matmul GEMV path matches float64 [asan]") {
  thread_pool pool(3);
  uint64_t seed = 1;
  for (const auto& s : small_shapes)
    for (dtype wt : {dtype::f32, dtype::f16, dtype::bf16})
      for (bool bias : {false, true})
        check_matmul(s, wt, bias, cpu::matmul_path::gemv, pool, seed += 10);
}

TEST_CASE("matmul GEMM path matches float64 [asan]") {
  thread_pool pool(3);
  uint64_t seed = 2;
  for (const auto& s : small_shapes)
    for (dtype wt : {dtype::f32, dtype::f16, dtype::bf16})
      for (bool bias : {false, true})
        check_matmul(s, wt, bias, cpu::matmul_path::gemm, pool, seed += 10);
}

TEST_CASE("matmul GEMM covers several K blocks, token chunks and register-tile remainders [asan]") {
  // n_in > 256 spans K blocks (the later ones accumulate); n_tokens > 512 spans token chunks; 12k+r rows
  // exercise every remainder tile.
  thread_pool pool(2);
  uint64_t seed = 3;
  for (const auto& s : std::vector<shape>{{530, 40, 35}, {25, 513, 48}, {37, 260, 100}, {96, 64, 64}})
    for (dtype wt : {dtype::f32, dtype::bf16})
      check_matmul(s, wt, true, cpu::matmul_path::gemm, pool, seed += 10);
  for (int64_t t = 1; t <= 14; ++t)
    check_matmul({t, 20, 33}, dtype::f16, false, cpu::matmul_path::gemm, pool, seed += 10);
}

TEST_CASE("matmul automatic choice matches float64 on both sides of the crossover [asan]") {
  uint64_t seed = 4;
  for (int threads : {1, 2, 5}) {
    thread_pool pool(threads);
    for (int64_t t : {int64_t{1}, int64_t{3}, cpu::matmul_gemm_min_tokens - 1, cpu::matmul_gemm_min_tokens})
      for (dtype wt : {dtype::f32, dtype::f16, dtype::bf16})
        check_matmul({t, 70, 45}, wt, threads == 2, cpu::matmul_path::automatic, pool, seed += 10);
  }
}

TEST_CASE("matmul with n_in == 0 gives the bias, n_tokens == 0 writes nothing [asan]") {
  thread_pool pool(2);
  std::vector<float> bias = {1.5f, -2.0f, 3.0f};
  std::vector<float> y(6, 99.0f);
  cpu::matmul(nullptr, 2, 0, nullptr, dtype::bf16, 3, bias.data(), y.data(), pool);
  CHECK(y == std::vector<float>{1.5f, -2.0f, 3.0f, 1.5f, -2.0f, 3.0f});
  cpu::matmul(nullptr, 2, 0, nullptr, dtype::f32, 3, nullptr, y.data(), pool);
  CHECK(y == std::vector<float>(6, 0.0f));
  std::vector<float> untouched(4, 5.0f);
  cpu::matmul(nullptr, 0, 8, nullptr, dtype::f32, 4, nullptr, untouched.data(), pool);
  CHECK(untouched == std::vector<float>(4, 5.0f));
}

TEST_CASE("matmul at a Llama-like shape matches float64 on sampled outputs") {
  // Full-size rows (n_in 2048) through both paths; the reference is computed for a sample of outputs only.
  thread_pool pool(2);
  const int64_t n_in = 2048, n_out = 1000;
  for (int64_t n_tokens : {int64_t{1}, int64_t{8}, int64_t{130}}) {
    for (dtype wt : {dtype::bf16, dtype::f16}) {
      auto x = test::random_floats(static_cast<size_t>(n_tokens * n_in), 50 + n_tokens, -2.0f, 2.0f);
      auto w = test::to_dtype(test::random_floats(static_cast<size_t>(n_out * n_in), 60, -0.05f, 0.05f), wt);
      std::vector<float> y(static_cast<size_t>(n_tokens * n_out));
      cpu::matmul(x.data(), n_tokens, n_in, w.data(), wt, n_out, nullptr, y.data(), pool);
      test::data_rng pick(7);
      for (int k = 0; k < 200; ++k) {
        int64_t t = pick.below(n_tokens), o = pick.below(n_out);
        double acc = 0, mag = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          double p = static_cast<double>(x[static_cast<size_t>(t * n_in + i)]) *
                     test::element(w, wt, static_cast<size_t>(o * n_in + i));
          acc += p;
          mag += std::fabs(p);
        }
        float got = y[static_cast<size_t>(t * n_out + o)];
        INFO("t " << t << " o " << o << " tokens " << n_tokens);
        REQUIRE(std::fabs(got - acc) <= 1e-6 + 4e-6 * mag + 1e-6 * std::fabs(acc));
      }
    }
  }
}
