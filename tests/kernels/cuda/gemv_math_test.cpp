// The bf16 GEMV's math on the CPU, no GPU needed (kernels/cuda/gemv_math.hpp, which gemv.cu runs): the chunk
// unpacking's element order, every input counted exactly once by exactly one lane (one-hot weights over widths with
// uneven chunk counts per lane), the emulated warp against a float64 reference within the f32 summation bound for
// the depth of its sums, the SiLU epilogue against float64, and the size rule that sends a problem to the GEMV.
// gemv_gpu_test.cpp holds the device to this emulation bit for bit.
#include "kernels/cuda/gemv_math.hpp"
#include "kernels/dtype.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace actorllm;
using namespace actorllm::cuda::gemv;

std::vector<uint16_t> random_bf16(std::mt19937& gen, int64_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (uint16_t& b : v)
    b = f32_to_bf16(d(gen));
  return v;
}

}  // namespace

TEST_CASE("gemv math: a chunk's 128 bits unpack to its eight bf16 weights in memory order") {
  const uint16_t bits[chunk_inputs] = {0x3f80, 0x4000, 0x4040, 0x4080,
                                       0xbf80, 0xc000, 0x0000, 0x3f00};  // 1 2 3 4 -1 -2 0 .5
  uint32_t words[4];
  std::memcpy(words, bits, sizeof words);  // what a 128-bit load of the row gives, little-endian
  float w[chunk_inputs];
  unpack_chunk(words, w);
  const float want[chunk_inputs] = {1.0f, 2.0f, 3.0f, 4.0f, -1.0f, -2.0f, 0.0f, 0.5f};
  for (int k = 0; k < chunk_inputs; ++k)
    CHECK(w[k] == want[k]);
}

TEST_CASE("gemv math: x is rounded to bf16 as kernels/dtype.hpp rounds it, NaN, infinities and ties included") {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               INFINITY,
                               -INFINITY,
                               NAN,
                               3.0e38f,
                               -1.0e-40f,
                               std::bit_cast<float>(0x3f808000u),
                               std::bit_cast<float>(0x3f818000u),   // ties
                               std::bit_cast<float>(0x7f7fffffu)};  // rounds up to infinity
  for (int i = 0; i < 100000; ++i)
    values.push_back(std::bit_cast<float>(bits(gen)));
  for (float v : values) {
    const float got = round_to_bf16(v), want = bf16_to_f32(f32_to_bf16(v));
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want)) {
      FAIL_CHECK(std::hexfloat << v << ": " << got << " vs " << want);
      break;
    }
  }
}

TEST_CASE("gemv math: every input is read exactly once, by one lane, for widths with uneven chunks per lane") {
  // A one-hot weight row picks input i: the warp's total must be exactly x[i] (any chunk skipped or read twice, or a
  // lane's sums lost in the butterfly, shows).
  for (const int64_t n_in : {int64_t{8}, int64_t{248}, int64_t{256}, int64_t{264}, int64_t{1032}, int64_t{2056}}) {
    std::vector<float> x(static_cast<size_t>(n_in));
    for (int64_t i = 0; i < n_in; ++i)  // distinct values bf16 holds exactly: 7 fraction bits, one binade per 128
      x[static_cast<size_t>(i)] =
          std::ldexp(1.0f + static_cast<float>(i % 128) / 128.0f, static_cast<int>(i / 128) - 8);
    std::vector<uint16_t> w(static_cast<size_t>(n_in), 0);
    for (int64_t i = 0; i < n_in; ++i) {
      w[static_cast<size_t>(i)] = f32_to_bf16(1.0f);
      const float got = emulate_output(w.data(), x.data(), n_in);
      w[static_cast<size_t>(i)] = 0;
      if (got != x[static_cast<size_t>(i)]) {
        FAIL_CHECK("n_in " << n_in << ", input " << i << ": got " << got);
        break;
      }
    }
  }
}

TEST_CASE("gemv math: the emulated warp against float64, within the f32 bound of its summation depth") {
  std::mt19937 gen(31);
  for (const int64_t n_in : {int64_t{64}, int64_t{264}, int64_t{4096}, int64_t{14336}}) {
    for (int rows = 1; rows <= max_rows; rows += 3) {
      const std::vector<uint16_t> w = random_bf16(gen, 5 * n_in, 0.02f);
      std::vector<float> x(static_cast<size_t>(rows * n_in));
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (float& v : x)
        v = d(gen);
      // A lane folds ceil(chunks / 32) chunks of 8 fmas; the butterfly adds 5 levels: the sum's depth.
      const auto depth = static_cast<double>((chunks_of(n_in) + warp_lanes - 1) / warp_lanes * chunk_inputs + 5);
      for (int64_t o = 0; o < 5; ++o) {
        for (int r = 0; r < rows; ++r) {
          const uint16_t* wr = w.data() + o * n_in;
          const float* xr = x.data() + r * n_in;
          double ref = 0.0, mag = 0.0;
          for (int64_t i = 0; i < n_in; ++i) {
            const double p = static_cast<double>(bf16_to_f32(wr[i])) * bf16_to_f32(f32_to_bf16(xr[i]));
            ref += p;
            mag += std::fabs(p);
          }
          const double got = emulate_output(wr, xr, n_in);
          const double bound = depth * std::ldexp(1.0, -24) * mag * 1.01;
          CHECK_MESSAGE(std::fabs(got - ref) <= bound, "n_in " << n_in << " row " << r << " out " << o << ": " << got
                                                               << " vs " << ref << " (bound " << bound << ")");
        }
      }
    }
  }
}

TEST_CASE("gemv math: the SiLU epilogue against float64 and the bias of the linear one") {
  for (float g = -20.0f; g <= 20.0f; g += 0.37f) {
    const float u = 1.5f - g * 0.25f;
    const double ref = static_cast<double>(g) * u / (1.0 + std::exp(-static_cast<double>(g)));
    CHECK(std::fabs(silu_times(g, u) - ref) <= 4e-7 * std::fabs(ref) + 1e-30);
  }
  const float bias[3] = {0.5f, -1.0f, 2.0f};
  CHECK(linear_output(1.0f, bias, 1) == 0.0f);
  CHECK(linear_output(1.0f, nullptr, 1) == 1.0f);
}

TEST_CASE("gemv math: the size rule takes 1 to 8 rows, whole chunks and 16-byte aligned operands") {
  alignas(16) static uint16_t w[64] = {};
  alignas(16) static float x[64] = {};
  CHECK(takes(1, 64, w, x));
  CHECK(takes(8, 64, w, x));
  CHECK_FALSE(takes(0, 64, w, x));
  CHECK_FALSE(takes(9, 64, w, x));  // cuBLAS from here on
  CHECK_FALSE(takes(1, 60, w, x));  // a partial chunk
  CHECK_FALSE(takes(1, 0, w, x));
  CHECK_FALSE(takes(1, 56, w + 1, x));  // misaligned weight
  CHECK_FALSE(takes(1, 56, w, x + 1));  // misaligned x
  CHECK(blocks_for(4096) == 4096 / warps_per_block);
  CHECK(blocks_for(4097) == 4096 / warps_per_block + 1);
  // The tuning's row limit lowers the rule's, never raises it.
  CHECK(takes(4, 64, w, x, 4));
  CHECK_FALSE(takes(5, 64, w, x, 4));
  CHECK_FALSE(takes(1, 64, w, x, 0));
  CHECK_FALSE(takes(9, 64, w, x, 16));
}

TEST_CASE(
    "gemv math: ACTORLLM_GEMV's text sets the loads in flight, the row limit and the weight size limit, and "
    "refuses others by name") {
  const tuning defaults;
  CHECK(defaults.loads_in_flight == 4);
  CHECK(defaults.max_rows == 1);
  CHECK(defaults.max_elements == -1);
  CHECK(parse_tuning("").loads_in_flight == defaults.loads_in_flight);
  CHECK(parse_tuning("").max_rows == defaults.max_rows);
  const tuning t = parse_tuning("loads=8,rows=2,elements=1000");
  CHECK(t.loads_in_flight == 8);
  CHECK(t.max_rows == 2);
  CHECK(t.max_elements == 1000);
  CHECK(parse_tuning("rows=0").max_rows == 0);
  CHECK(parse_tuning("elements=all").max_elements == -1);
  CHECK(parse_tuning("loads=32").max_rows == defaults.max_rows);
  // The size rule: at most max_elements, any size for -1.
  CHECK(takes_weight_of(int64_t{4096} * 128256, defaults));
  const tuning capped = parse_tuning("elements=16777216");
  CHECK(takes_weight_of(4096 * 4096, capped));
  CHECK_FALSE(takes_weight_of(4096 * 6144, capped));
  CHECK(takes_weight_of(int64_t{4096} * 128256, parse_tuning("elements=all")));
  const auto refused = [](const std::string& text, const std::string& says) {
    CAPTURE(text);
    try {
      (void)parse_tuning(text);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string{e.what()}.find(says) != std::string::npos);
    }
  };
  refused("loads=5", "loads must be 4, 8, 16 or 32, not '5'");
  refused("loads=", "loads must be 4, 8, 16 or 32, not ''");
  refused("rows=9", "rows must be 0 to 8, not '9'");
  refused("rows=-1", "rows must be 0 to 8, not '-1'");
  refused("rows=99999999999", "rows must be 0 to 8");
  refused("elements=many", "elements must be a count or 'all', not 'many'");
  refused("elements=-5", "elements must be a count or 'all', not '-5'");
  refused("threads=4", "'threads=4' is not loads=N, rows=N or elements=N");
  refused("loads", "'loads' is not loads=N, rows=N or elements=N");
}
