// The bf16 GEMV on the GPU (kernels/cuda/gemv.cu) held to its CPU emulation (gemv_math.hpp's emulate_output) bit for
// bit: one to eight rows of x in f32 and in bf16, widths with uneven chunks per lane, a group of three weights with
// biases in one launch (q/k/v), and the SiLU×mul epilogue (within its expf's rounding), into f32 and bf16. Guards past
// every output catch writes beyond it. Skipped ("skipped: no GPU") where there is none; the emulation itself is checked
// against float64 in gemv_math_test.cpp.
#include "kernels/cuda/gemv.hpp"
#include "kernels/dtype.hpp"

#include "gpu_test_util.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace {

using namespace actorllm;
using actorllm::cuda_test::device_array;
using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::require_gpu;

constexpr float guard_value = 4242.0f;
constexpr int64_t guard_floats = 16;

std::vector<uint16_t> random_bf16(std::mt19937& gen, int64_t n) {
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (uint16_t& b : v)
    b = f32_to_bf16(d(gen));
  return v;
}

std::vector<float> random_x(std::mt19937& gen, int64_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v)
    f = d(gen);
  return v;
}

// y [rows, n_out] followed by guards.
std::vector<float> guarded_output(int64_t rows, int64_t n_out) {
  std::vector<float> v(static_cast<size_t>(rows * n_out + guard_floats), -1.0f);
  for (int64_t i = rows * n_out; i < rows * n_out + guard_floats; ++i)
    v[static_cast<size_t>(i)] = guard_value;
  return v;
}

void check_guards(const std::vector<float>& y, int64_t n) {
  for (int64_t i = n; i < static_cast<int64_t>(y.size()); ++i)
    REQUIRE_MESSAGE(y[static_cast<size_t>(i)] == guard_value, "written past the output at " << i);
}

}  // namespace

TEST_CASE(
    "cuda gemv: q/k/v in one launch equal the CPU emulation bit for bit, x in f32 and bf16, at every loads "
    "setting" *
    doctest::skip(!gpu_available())) {
  require_gpu();
  std::mt19937 gen(2031);
  const cuda::gemv::tuning saved = cuda::gemv_tuning();
  for (const int loads : cuda::gemv::loads_in_flight_choices)
    for (const int64_t n_in : {int64_t{8}, int64_t{264}, int64_t{4096}, int64_t{8200}}) {
      for (int rows = 1; rows <= cuda::gemv::max_rows; ++rows) {
        for (const bool x_bf16 : {false, true}) {
          cuda::gemv_tuning().loads_in_flight = loads;
          CAPTURE(loads);
          CAPTURE(n_in);
          CAPTURE(rows);
          CAPTURE(x_bf16);
          const int64_t n_outs[3] = {37, 8, 5};
          std::vector<float> x = random_x(gen, rows * n_in);
          std::vector<uint16_t> x_bits(x.size());
          for (size_t i = 0; i < x.size(); ++i) {
            x_bits[i] = f32_to_bf16(x[i]);
            if (x_bf16)
              x[i] = bf16_to_f32(x_bits[i]);  // the emulation reads the same values
          }
          device_array<float> dx(x);
          device_array<uint16_t> dxb(x_bits);
          std::vector<std::vector<uint16_t>> w;
          std::vector<std::vector<float>> bias;
          std::vector<std::unique_ptr<device_array<uint16_t>>> dw;
          std::vector<std::unique_ptr<device_array<float>>> db, dy;
          cuda::gemv_output outs[3];
          for (int i = 0; i < 3; ++i) {
            w.push_back(random_bf16(gen, n_outs[i] * n_in));
            bias.push_back(random_x(gen, n_outs[i]));
            dw.push_back(std::make_unique<device_array<uint16_t>>(w.back()));
            db.push_back(std::make_unique<device_array<float>>(bias.back()));
            dy.push_back(std::make_unique<device_array<float>>(guarded_output(rows, n_outs[i])));
            outs[i] = cuda::gemv_output{dw.back()->ptr, i == 2 ? nullptr : db.back()->ptr, dy.back()->ptr, n_outs[i]};
          }
          cuda::gemv_linear(outs, 3, x_bf16 ? static_cast<const void*>(dxb.ptr) : dx.ptr, x_bf16, rows, n_in, nullptr);
          ACTORLLM_CUDA_CHECK(cudaDeviceSynchronize());
          for (size_t i = 0; i < 3; ++i) {
            const std::vector<float> y = dy[i]->to_host();
            check_guards(y, rows * n_outs[i]);
            for (int r = 0; r < rows; ++r) {
              for (int64_t o = 0; o < n_outs[i]; ++o) {
                float want = cuda::gemv::emulate_output(w[i].data() + o * n_in, x.data() + r * n_in, n_in);
                if (i < 2)
                  want += bias[i][static_cast<size_t>(o)];
                const float got = y[static_cast<size_t>(r * n_outs[i] + o)];
                if (got != want) {
                  FAIL_CHECK("output " << i << " row " << r << " o " << o << ": " << got << " vs emulated " << want);
                  break;
                }
              }
            }
          }
        }
      }
    }
  cuda::gemv_tuning() = saved;
}

TEST_CASE("cuda gemv: gate, up and SiLU×mul in one launch against the emulated sums" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  std::mt19937 gen(2032);
  const int64_t n_in = 1032, n_ff = 301;
  for (int rows : {1, 3, 8}) {
    for (const bool out_bf16 : {false, true}) {
      CAPTURE(rows);
      CAPTURE(out_bf16);
      const std::vector<float> x = random_x(gen, rows * n_in);
      const std::vector<uint16_t> wg = random_bf16(gen, n_ff * n_in), wu = random_bf16(gen, n_ff * n_in);
      device_array<float> dx(x), dout(guarded_output(rows, n_ff));  // bf16: the first half, guards untouched
      device_array<uint16_t> dwg(wg), dwu(wu);
      cuda::gemv_silu_gate(dwg.ptr, dwu.ptr, n_ff, dx.ptr, false, rows, n_in, dout.ptr, out_bf16, nullptr);
      ACTORLLM_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> out = dout.to_host();
      check_guards(out, rows * n_ff);
      std::vector<uint16_t> bits(static_cast<size_t>(rows * n_ff));
      std::memcpy(bits.data(), out.data(), bits.size() * sizeof(uint16_t));
      for (int r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < n_ff; ++o) {
          const float g = cuda::gemv::emulate_output(wg.data() + o * n_in, x.data() + r * n_in, n_in);
          const float u = cuda::gemv::emulate_output(wu.data() + o * n_in, x.data() + r * n_in, n_in);
          const double want = static_cast<double>(g) * u / (1.0 + std::exp(-static_cast<double>(g)));
          const auto i = static_cast<size_t>(r * n_ff + o);
          const double got = out_bf16 ? bf16_to_f32(bits[i]) : out[i];
          const double rel = out_bf16 ? 1.0 / 256 : 1e-6;  // bf16: half a unit in the 8th bit, rounded once
          CHECK_MESSAGE(std::fabs(got - want) <= rel * std::fabs(want) + 1e-30, "row " << r << " o " << o);
        }
      }
    }
  }
}
