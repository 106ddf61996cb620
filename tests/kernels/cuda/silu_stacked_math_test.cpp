// The CUDA silu_mul_stacked kernel's math on the CPU, no GPU needed: elementwise.cu's grid-stride loop written out
// over every output index, calling the very silu_stacked_math.hpp function the kernel calls, against the CPU
// backend's silu_mul_stacked and a float64 reference on rows of odd and even widths.
#include "kernels/cuda/silu_stacked_math.hpp"
#include "kernels/cpu/cpu_backend.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace actorllm;

TEST_CASE("silu_stacked::at reads row r's gate at column j and its up n_ff further, as the CPU backend does") {
  cpu::cpu_backend be{1};
  for (int64_t n_ff : {1, 7, 16, 33}) {
    for (int64_t n_rows : {1, 3}) {
      CAPTURE(n_ff);
      CAPTURE(n_rows);
      std::vector<float> gate_up(static_cast<size_t>(n_rows * 2 * n_ff));
      for (size_t i = 0; i < gate_up.size(); ++i)
        gate_up[i] = static_cast<float>((static_cast<int64_t>(i * 37 % 23) - 11)) * 0.37f;
      const tensor in = make_host_tensor(dtype::f32, {n_rows, 2 * n_ff});
      std::memcpy(in.data(), gate_up.data(), gate_up.size() * sizeof(float));
      const tensor out = make_host_tensor(dtype::f32, {n_rows, n_ff});
      be.silu_mul_stacked(in, out);
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
