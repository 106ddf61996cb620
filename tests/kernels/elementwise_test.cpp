// rms_norm, silu_mul, add_inplace, embedding, softmax / log_softmax against float64 references.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cpu/softmax.hpp"

using namespace actorllm;

namespace {
const std::vector<int64_t> widths = {1, 3, 15, 16, 17, 33, 64, 100, 2048};
constexpr float inf = std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE("rms_norm matches float64 for every weight dtype, in and out of place [asan]") {
  uint64_t seed = 100;
  for (dtype wt : {dtype::f32, dtype::f16, dtype::bf16}) {
    for (int64_t n_embd : widths) {
      for (int64_t n_tokens : {1, 4}) {
        const float eps = 1e-5f;
        auto x = test::random_floats(static_cast<size_t>(n_tokens * n_embd), ++seed, -3.0f, 3.0f);
        auto w = test::to_dtype(test::random_floats(static_cast<size_t>(n_embd), ++seed, 0.5f, 1.5f), wt);
        std::vector<double> ref(x.size());
        for (int64_t t = 0; t < n_tokens; ++t) {
          double ss = 0;
          for (int64_t i = 0; i < n_embd; ++i)
            ss += static_cast<double>(x[static_cast<size_t>(t * n_embd + i)]) * x[static_cast<size_t>(t * n_embd + i)];
          double inv = 1.0 / std::sqrt(ss / static_cast<double>(n_embd) + eps);
          for (int64_t i = 0; i < n_embd; ++i)
            ref[static_cast<size_t>(t * n_embd + i)] =
                x[static_cast<size_t>(t * n_embd + i)] * inv * test::element(w, wt, static_cast<size_t>(i));
        }
        std::vector<float> y(x.size());
        cpu::rms_norm(x.data(), n_tokens, n_embd, w.data(), wt, eps, y.data());
        std::string what = "rms_norm " + std::string(dtype_name(wt)) + " n_embd " + std::to_string(n_embd);
        test::check_close(y, ref, 1e-6, 2e-6, what);
        cpu::rms_norm(x.data(), n_tokens, n_embd, w.data(), wt, eps, x.data());  // y aliases x
        test::check_close(x, ref, 1e-6, 2e-6, what + " in place");
      }
    }
  }
}

TEST_CASE("silu_mul matches float64, including large magnitudes, and may alias [asan]") {
  for (int64_t n : widths) {
    auto gate = test::random_floats(static_cast<size_t>(n), 200 + n, -12.0f, 12.0f);
    auto up = test::random_floats(static_cast<size_t>(n), 300 + n, -2.0f, 2.0f);
    if (n >= 3) {
      gate[0] = -150.0f;  // e^150 overflows float: silu -> -0
      gate[1] = 150.0f;   // silu(g) = g
      gate[2] = 0.0f;
    }
    std::vector<double> ref(gate.size());
    for (size_t i = 0; i < gate.size(); ++i) {
      double g = gate[i];
      ref[i] = g / (1.0 + std::exp(-g)) * up[i];
    }
    std::vector<float> out(gate.size());
    cpu::silu_mul(gate.data(), up.data(), n, out.data());
    test::check_close(out, ref, 1e-7, 2e-6, "silu_mul n " + std::to_string(n));
    cpu::silu_mul(gate.data(), up.data(), n, gate.data());
    test::check_close(gate, ref, 1e-7, 2e-6, "silu_mul in place n " + std::to_string(n));
  }
}

TEST_CASE("add_inplace adds element-wise [asan]") {
  for (int64_t n : widths) {
    auto y = test::random_floats(static_cast<size_t>(n), 400 + n);
    auto x = test::random_floats(static_cast<size_t>(n), 500 + n);
    std::vector<double> ref(y.size());
    for (size_t i = 0; i < y.size(); ++i)
      ref[i] = static_cast<double>(y[i]) + x[i];
    cpu::add_inplace(y.data(), x.data(), n);
    test::check_close(y, ref, 0.0, 1e-7, "add_inplace");  // one f32 rounding
  }
}

TEST_CASE("embedding looks up rows of a vocab shard and zeros the rest [asan]") {
  for (dtype tt : {dtype::f32, dtype::f16, dtype::bf16}) {
    for (int64_t n_embd : {1, 17, 64}) {
      const int64_t row_begin = 10, n_rows = 7;
      auto table_values = test::random_floats(static_cast<size_t>(n_rows * n_embd), 600 + n_embd, -5.0f, 5.0f);
      auto table = test::to_dtype(table_values, tt);
      std::vector<int32_t> ids = {10, 16, 9, 17, 0, 13, 13, -1, 1000000};
      std::vector<float> out(ids.size() * static_cast<size_t>(n_embd), 42.0f);
      cpu::embedding(ids.data(), static_cast<int64_t>(ids.size()), table.data(), tt, row_begin, n_rows, n_embd,
                     out.data());
      for (size_t t = 0; t < ids.size(); ++t) {
        int64_t row = ids[t] - row_begin;
        for (int64_t i = 0; i < n_embd; ++i) {
          float want = row >= 0 && row < n_rows
                           ? static_cast<float>(test::element(table, tt, static_cast<size_t>(row * n_embd + i)))
                           : 0.0f;
          INFO("token " << t << " id " << ids[t] << " dim " << i << " dtype " << dtype_name(tt));
          REQUIRE(out[t * static_cast<size_t>(n_embd) + static_cast<size_t>(i)] == want);
        }
      }
    }
  }
}

TEST_CASE("softmax and log_softmax match float64 and stay stable [asan]") {
  for (int64_t n : {1, 2, 7, 16, 33, 1000, 128256}) {
    for (float offset : {0.0f, 1000.0f, -1000.0f}) {
      auto x = test::random_floats(static_cast<size_t>(n), 700 + n, -20.0f, 20.0f);
      for (auto& v : x)
        v += offset;  // exp(x) alone would overflow or underflow
      if (n > 4) {
        x[1] = -inf;
        x[3] = -inf;
      }
      double m = -INFINITY;
      for (float v : x)
        m = std::max(m, static_cast<double>(v));
      double sum = 0;
      for (float v : x)
        sum += std::exp(static_cast<double>(v) - m);
      std::vector<double> ref_p(x.size()), ref_lp(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        ref_p[i] = std::exp(static_cast<double>(x[i]) - m) / sum;
        ref_lp[i] = static_cast<double>(x[i]) - m - std::log(sum);
      }
      std::vector<float> p = x, lp = x;
      cpu::softmax(p.data(), n);
      cpu::log_softmax(lp.data(), n);
      std::string what = "n " + std::to_string(n) + " offset " + std::to_string(offset);
      test::check_close(p, ref_p, 1e-9, 1e-5, "softmax " + what);
      if (n > 4) {
        CHECK(p[1] == 0.0f);
        CHECK(lp[1] == -inf);
        lp[1] = lp[3] = 0.0f;
        ref_lp[1] = ref_lp[3] = 0.0;
      }
      test::check_close(lp, ref_lp, 2e-6, 1e-6, "log_softmax " + what);
      double total = 0;
      for (float v : p)
        total += v;
      CHECK(std::fabs(total - 1.0) < 1e-5);
      CHECK(std::fabs(cpu::log_sum_exp(x.data(), n) - (m + std::log(sum))) < 1e-6 * std::fabs(m) + 1e-5);
    }
  }
}

TEST_CASE("softmax of all -inf is uniform, max_value ignores NaN [asan]") {
  std::vector<float> x(5, -inf);
  cpu::softmax(x.data(), 5);
  for (float v : x)
    CHECK(v == doctest::Approx(0.2));
  std::vector<float> y(5, -inf);
  cpu::log_softmax(y.data(), 5);
  for (float v : y)
    CHECK(v == doctest::Approx(-std::log(5.0)));
  std::vector<float> z(40, 1.0f);
  z[7] = std::numeric_limits<float>::quiet_NaN();
  z[35] = std::numeric_limits<float>::quiet_NaN();
  z[20] = 3.0f;
  CHECK(cpu::max_value(z.data(), 40) == 3.0f);
  CHECK(cpu::max_value(z.data(), 0) == -inf);
}
