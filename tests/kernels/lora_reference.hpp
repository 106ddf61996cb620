// backend::lora_add in float64, written here from its doc comment (never from a kernel), with random cases and the
// check of a kernel's result against it. Shared by the CPU kernel's test (lora_test.cpp), the backend parity test
// and the CUDA kernels' math run on the CPU (tests/kernels/cuda/lora_math_test.cpp).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"

namespace actorllm::test {

/// One lora_add call's inputs: x [n, n_in], a [n_slots, rank, n_in], b [n_slots, n_out, rank], row_slots [n], and
/// y [n, n_out] and shrunk [n, rank] as they are before the call.
struct lora_case {
  int64_t n = 0, n_in = 0, n_out = 0, n_slots = 0, rank = 0;
  std::vector<float> x, a, b, y, shrunk;
  std::vector<int32_t> slots;

  std::string describe() const {
    return "n " + std::to_string(n) + " n_in " + std::to_string(n_in) + " n_out " + std::to_string(n_out) + " slots " +
           std::to_string(n_slots) + " rank " + std::to_string(rank);
  }
};

/// Random values in every input; slots drawn from -1 .. n_slots - 1 with, when n > 1, row 0 without an adapter
/// and the last row on the last slot. y and shrunk start as random values, so that a kernel that writes a row it
/// must leave alone, or forgets the += of y, shows.
inline lora_case random_lora_case(int64_t n, int64_t n_in, int64_t n_out, int64_t n_slots, int64_t rank,
                                  uint64_t seed) {
  lora_case c{n, n_in, n_out, n_slots, rank, {}, {}, {}, {}, {}, {}};
  c.x = random_floats(static_cast<size_t>(n * n_in), seed, -1.0f, 1.0f);
  c.a = random_floats(static_cast<size_t>(n_slots * rank * n_in), seed + 1, -0.5f, 0.5f);
  c.b = random_floats(static_cast<size_t>(n_slots * n_out * rank), seed + 2, -0.5f, 0.5f);
  c.y = random_floats(static_cast<size_t>(n * n_out), seed + 3, -2.0f, 2.0f);
  c.shrunk = random_floats(static_cast<size_t>(n * rank), seed + 4, 50.0f, 60.0f);
  data_rng r(seed + 5);
  c.slots.resize(static_cast<size_t>(n));
  for (int32_t& s : c.slots)
    s = static_cast<int32_t>(r.below(n_slots + 1)) - 1;
  if (n > 1) {
    c.slots.front() = -1;
    c.slots.back() = static_cast<int32_t>(n_slots - 1);
  }
  return c;
}

/// The float64 results and per-element tolerances. An f32 sum of m products is within about m 2^-24 of its sum of
/// magnitudes in the worst case and sqrt(m) 2^-24 in practice: the tolerance is rel_tol times the sum of magnitudes
/// (a wrong slot, row or rank index is off by the size of the result, far above it).
struct lora_expected {
  std::vector<double> shrunk, shrunk_tol, y, y_tol;
};

/// The relative bound per unit of summed magnitude: 1e-5 is above sqrt(m) 2^-24 for every m the tests use (up to
/// n_in 2048 plus rank 17 terms) with a margin of several times, and far below an indexing error.
inline constexpr double lora_rel_tol = 1e-5;

inline lora_expected lora_reference(const lora_case& c) {
  lora_expected e;
  e.shrunk.assign(c.shrunk.begin(), c.shrunk.end());
  e.shrunk_tol.assign(c.shrunk.size(), 0.0);
  e.y.assign(c.y.begin(), c.y.end());
  e.y_tol.assign(c.y.size(), 0.0);
  std::vector<double> mag(static_cast<size_t>(c.rank));  // sum over i of |a[s, r, i] x[t, i]|
  for (int64_t t = 0; t < c.n; ++t) {
    const int64_t s = c.slots[static_cast<size_t>(t)];
    if (s < 0)
      continue;
    for (int64_t r = 0; r < c.rank; ++r) {
      double sum = 0, m = 0;
      for (int64_t i = 0; i < c.n_in; ++i) {
        const double p = static_cast<double>(c.a[static_cast<size_t>((s * c.rank + r) * c.n_in + i)]) *
                         c.x[static_cast<size_t>(t * c.n_in + i)];
        sum += p;
        m += std::fabs(p);
      }
      e.shrunk[static_cast<size_t>(t * c.rank + r)] = sum;
      e.shrunk_tol[static_cast<size_t>(t * c.rank + r)] = 1e-6 + lora_rel_tol * m;
      mag[static_cast<size_t>(r)] = m;
    }
    for (int64_t o = 0; o < c.n_out; ++o) {
      const size_t k = static_cast<size_t>(t * c.n_out + o);
      double sum = c.y[k], m = std::fabs(sum);
      for (int64_t r = 0; r < c.rank; ++r) {
        const double bv = c.b[static_cast<size_t>((s * c.n_out + o) * c.rank + r)];
        sum += bv * e.shrunk[static_cast<size_t>(t * c.rank + r)];
        m += std::fabs(bv) * mag[static_cast<size_t>(r)];  // the shrink's error carried through b, and expand's own
      }
      e.y[k] = sum;
      e.y_tol[k] = 1e-6 + lora_rel_tol * m;
    }
  }
  return e;
}

/// Checks a kernel's y and shrunk after the call against `e`: rows with an adapter within tolerance, every other
/// row bit for bit as it was before.
inline void check_lora(const lora_case& c, const lora_expected& e, const std::vector<float>& shrunk,
                       const std::vector<float>& y, const std::string& what) {
  REQUIRE(shrunk.size() == c.shrunk.size());
  REQUIRE(y.size() == c.y.size());
  INFO(what);
  INFO(c.describe());
  for (int64_t t = 0; t < c.n; ++t) {
    const int32_t s = c.slots[static_cast<size_t>(t)];
    const auto yt = static_cast<size_t>(t * c.n_out), st = static_cast<size_t>(t * c.rank);
    if (s < 0) {
      CAPTURE(t);
      CHECK_MESSAGE(std::memcmp(y.data() + yt, c.y.data() + yt, static_cast<size_t>(c.n_out) * sizeof(float)) == 0,
                    "a row without an adapter changed in y");
      CHECK_MESSAGE(
          std::memcmp(shrunk.data() + st, c.shrunk.data() + st, static_cast<size_t>(c.rank) * sizeof(float)) == 0,
          "a row without an adapter changed in shrunk");
    }
  }
  check_close(y.data(), e.y.data(), y.size(), e.y_tol.data(), 0.0, 0.0, what + ": y");
  check_close(shrunk.data(), e.shrunk.data(), shrunk.size(), e.shrunk_tol.data(), 0.0, 0.0, what + ": shrunk");
}

}  // namespace actorllm::test
