// Shared helpers of the kernel parity tests: deterministic random data and the llm.c-style tolerance check
// |got - ref| <= tol + |ref| * eps against float64 references.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace actorllm::test {

/// Small deterministic generator for test data (splitmix64), independent of the library under test.
class data_rng {
 public:
  explicit data_rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [lo, hi).
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-53);
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t s_;
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  data_rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v)
    x = r.uniform(lo, hi);
  return v;
}

/// A buffer of `n` elements of type `t` holding `values` rounded to it.
inline std::vector<uint8_t> to_dtype(const std::vector<float>& values, dtype t) {
  std::vector<uint8_t> out(values.size() * dtype_size(t));
  for (size_t i = 0; i < values.size(); ++i)
    store_from_f32(out.data(), t, i, values[i]);
  return out;
}

/// Element i of a typed buffer as double (the exact stored value).
inline double element(const std::vector<uint8_t>& buf, dtype t, size_t i) {
  return static_cast<double>(load_as_f32(buf.data(), t, i));
}

/// Checks got[i] against ref[i] with |got - ref| <= tol[i] + |ref| * eps (tol given per element, or one value).
/// Reports the number of mismatches and the worst one, instead of one failure per element.
inline void check_close(const float* got, const double* ref, size_t n, const double* tol, double tol_scalar, double eps,
                        const std::string& what) {
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < n; ++i) {
    double t = (tol != nullptr ? tol[i] : tol_scalar) + std::fabs(ref[i]) * eps;
    double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    bool ok = err <= t;  // false for NaN
    if (!ok) {
      ++bad;
      double excess = std::isnan(err) ? INFINITY : err - t;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  INFO(what);
  if (bad != 0) {
    INFO("first worst mismatch at " << worst << ": got " << got[worst] << " ref " << ref[worst]);
    CHECK(bad == 0);
  } else {
    CHECK(bad == 0);
  }
}

inline void check_close(const std::vector<float>& got, const std::vector<double>& ref, double tol, double eps,
                        const std::string& what) {
  REQUIRE(got.size() == ref.size());
  check_close(got.data(), ref.data(), got.size(), nullptr, tol, eps, what);
}

/// silu(g) * u from float64 gate and up values and their tolerances: each factor's error propagated
/// (d silu / dg <= 1.1), plus the f32 silu itself.
inline void silu_gate_reference(const std::vector<double>& g, const std::vector<double>& g_tol,
                                const std::vector<double>& u, const std::vector<double>& u_tol,
                                std::vector<double>& ref, std::vector<double>& tol) {
  ref.resize(g.size());
  tol.resize(g.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const double sig = 1.0 / (1.0 + std::exp(-g[i]));
    ref[i] = g[i] * sig * u[i];
    tol[i] = 1.1 * g_tol[i] * std::fabs(u[i]) + u_tol[i] * std::fabs(g[i] * sig) + 1e-5 * std::fabs(ref[i]);
  }
}

}  // namespace actorllm::test
