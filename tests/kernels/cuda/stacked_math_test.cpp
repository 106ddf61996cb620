// The math of the CUDA kernels over a stacked projection's output on the CPU, no GPU needed: elementwise.cu's
// grid-stride loops written out over every index, calling the very stacked_math.hpp functions the kernels call
// (silu_stacked::at, split::locate), against the CPU backend's silu_mul_stacked and split_columns and a float64
// reference, on rows of odd and even widths.
#include "kernels/cuda/stacked_math.hpp"
#include "kernels/cpu/cpu_backend.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace actorllm;

namespace {

tensor host_matrix(int64_t rows, int64_t cols, const std::vector<float>& values) {
  const tensor t = make_host_tensor(dtype::f32, {rows, cols});
  std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

}  // namespace

TEST_CASE("silu_stacked::at reads row r's gate at column j and its up n_ff further, as the CPU backend does") {
  cpu::cpu_backend be{1};
  for (int64_t n_ff : {1, 7, 16, 33}) {
    for (int64_t n_rows : {1, 3}) {
      CAPTURE(n_ff);
      CAPTURE(n_rows);
      std::vector<float> gate_up(static_cast<size_t>(n_rows * 2 * n_ff));
      for (size_t i = 0; i < gate_up.size(); ++i)
        gate_up[i] = static_cast<float>((static_cast<int64_t>(i * 37 % 23) - 11)) * 0.37f;
      const tensor out = make_host_tensor(dtype::f32, {n_rows, n_ff});
      be.silu_mul_stacked(host_matrix(n_rows, 2 * n_ff, gate_up), out);
      for (int64_t i = 0; i < n_rows * n_ff; ++i) {  // the kernel's loop over flat output indices
        const float got = cuda::silu_stacked::at(gate_up.data(), n_ff, i);
        const double g = gate_up[static_cast<size_t>(i / n_ff * 2 * n_ff + i % n_ff)];
        const double u = gate_up[static_cast<size_t>(i / n_ff * 2 * n_ff + n_ff + i % n_ff)];
        const double ref = g * u / (1.0 + std::exp(-g));
        CHECK(std::fabs(got - ref) <= 1e-6 * (1.0 + std::fabs(ref)));
        CHECK(std::fabs(got - out.data_as<float>()[i]) <= 1e-6f * (1.0f + std::fabs(got)));
      }
    }
  }
}

TEST_CASE("split::locate sends every column of a row to its part, as the CPU backend's split_columns does") {
  cpu::cpu_backend be{1};
  // q|k|v-like parts, a single part, and parts that leave the source's last columns unread.
  for (const std::vector<int64_t>& cols : std::vector<std::vector<int64_t>>{{8, 4, 4}, {5}, {3, 1, 2, 7}, {2, 2}}) {
    for (int64_t n_rows : {1, 2, 5}) {
      CAPTURE(n_rows);
      int64_t total = 0;
      for (int64_t c : cols)
        total += c;
      const int64_t width = total + (cols.size() == 2 ? 3 : 0);
      std::vector<float> src(static_cast<size_t>(n_rows * width));
      for (size_t i = 0; i < src.size(); ++i)
        src[i] = static_cast<float>(i) + 0.5f;
      cuda::split::parts p{};
      std::vector<std::vector<float>> emulated;
      std::vector<tensor> dsts;
      for (int64_t c : cols) {
        emulated.emplace_back(static_cast<size_t>(n_rows * c), -1.0f);
        dsts.push_back(make_host_tensor(dtype::f32, {n_rows, c}));
        p.dst[p.n] = emulated.back().data();
        p.cols[p.n] = c;
        ++p.n;
      }
      p.total = total;
      for (int64_t i = 0; i < n_rows * total; ++i) {  // the kernel's loop over the parts' elements
        const cuda::split::target t = cuda::split::locate(p, width, i);
        p.dst[t.part][t.index] = src[static_cast<size_t>(t.src)];
      }
      be.split_columns(host_matrix(n_rows, width, src), dsts);
      int64_t first = 0;
      for (size_t part = 0; part < cols.size(); ++part) {
        for (int64_t r = 0; r < n_rows; ++r)
          for (int64_t c = 0; c < cols[part]; ++c) {
            const float want = src[static_cast<size_t>(r * width + first + c)];
            REQUIRE(emulated[part][static_cast<size_t>(r * cols[part] + c)] == want);
            REQUIRE(dsts[part].data_as<float>()[r * cols[part] + c] == want);
          }
        first += cols[part];
      }
    }
  }
}
