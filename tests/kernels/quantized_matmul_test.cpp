// Quantized Linear weights on the CPU (kernels/cpu/matmul_quantized): the panel layout, every kernel path (GEMV and
// GEMM, AVX-512 and scalar where both exist) for 4- and 8-bit weight-only formats against float64 references of the
// dequantized weight (GEMV: times x on the 16-bit activation grid, computed here apart from the library; GEMM: times
// x rounded to bf16), and W8A8 bit for bit against a scalar integer reference of vLLM's per-token int8 scheme. Then
// the same through the CPU backend (import_quantized_linear, matmul, matmul_group, matmul_silu_gate), and the
// default import (bf16 dequantization) against it.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/backend_checks.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "kernels/cpu/matmul_quantized.hpp"
#include "kernels/quantized_linear.hpp"

using namespace actorllm;

namespace {

using cpu::matmul_path;
using cpu::quantized_kernels;

// The kernel families this build runs: the AVX-512 kernels where it has them, and the scalar path always.
std::vector<quantized_kernels> families() {
  if (cpu::have_quantized_avx512_kernels())
    return {quantized_kernels::best, quantized_kernels::scalar};
  return {quantized_kernels::scalar};
}

const char* family_name(quantized_kernels k) { return k == quantized_kernels::best ? "best" : "scalar"; }

// Selects the kernel family until the end of the scope.
struct family_scope {
  explicit family_scope(quantized_kernels k) { cpu::set_quantized_kernels(k); }
  ~family_scope() { cpu::set_quantized_kernels(quantized_kernels::best); }
  family_scope(const family_scope&) = delete;
  family_scope& operator=(const family_scope&) = delete;
};

// How a test weight is made.
enum class maker {
  rtn_symmetric,   // quantize_linear_rtn, symmetric
  rtn_asymmetric,  // quantize_linear_rtn, min..max with a zero point
  hand_made,       // random codes, zero points and scales of both signs
};

quantized_linear make_weight(int bits, int64_t n_out, int64_t n_in, int64_t group_size, maker how, activation_quant act,
                             uint64_t seed) {
  if (how != maker::hand_made) {
    const auto w = test::random_floats(static_cast<size_t>(n_out * n_in), seed, -0.08f, 0.06f);
    quantized_linear q = quantize_linear_rtn(w.data(), n_out, n_in, bits, group_size,
                                             how == maker::rtn_symmetric || act == activation_quant::int8_per_token);
    q.activations = act;
    return q;
  }
  quantized_linear q;
  q.bits = bits;
  q.n_out = n_out;
  q.n_in = n_in;
  q.group_size = group_size == 0 ? n_in : group_size;
  q.activations = act;
  test::data_rng rng(seed);
  const int limit = 1 << bits;
  q.codes.resize(static_cast<size_t>(n_out * n_in));
  for (auto& c : q.codes)
    c = static_cast<uint8_t>(rng.below(limit));
  const auto n_params = static_cast<size_t>(n_out * q.n_groups());
  q.scales.resize(n_params);
  q.zeros.resize(n_params);
  for (size_t i = 0; i < n_params; ++i) {
    q.scales[i] = rng.uniform(0.001f, 0.02f) * (rng.below(5) == 0 ? -1.0f : 1.0f);
    q.zeros[i] = act == activation_quant::int8_per_token ? uint8_t{128} : static_cast<uint8_t>(rng.below(limit));
  }
  q.validate();
  return q;
}

// Token rows whose 128-input blocks differ in magnitude (so the activation grid's steps differ from block to block),
// with a few outliers.
std::vector<float> make_input(int64_t n_tokens, int64_t n_in, uint64_t seed) {
  std::vector<float> x = test::random_floats(static_cast<size_t>(n_tokens * n_in), seed, -2.0f, 2.0f);
  static constexpr float block_scale[] = {1.0f, 0.03f, 7.0f, 0.4f, 150.0f};
  test::data_rng rng(seed + 99);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t i = 0; i < n_in; ++i) {
      float& v = x[static_cast<size_t>(t * n_in + i)];
      v *= block_scale[(i / 128 + t) % 5];
      if (rng.below(97) == 0)
        v *= 40.0f;
    }
  return x;
}

double bf16_of(float x) { return static_cast<double>(bf16_to_f32(f32_to_bf16(x))); }

// The weight-only activation grid, written apart from the library: per block of 128 inputs the step 2^(E - 15) with
// 2^(E - 1) <= max |x| < 2^E, values rounded to nearest even and saturated to int16 (step 1 below 2^-100).
std::vector<double> reference_grid(const float* x, int64_t n, std::vector<int>* codes = nullptr,
                                   std::vector<float>* steps = nullptr) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t b0 = 0; b0 < n; b0 += 128) {
    const int64_t end = std::min(n, b0 + 128);
    double absmax = 0;
    for (int64_t i = b0; i < end; ++i)
      absmax = std::max(absmax, std::fabs(static_cast<double>(x[i])));
    double step = 1;
    if (absmax >= std::ldexp(1.0, -100)) {
      int e = 0;
      while (std::ldexp(1.0, e) <= absmax)
        ++e;
      while (std::ldexp(1.0, e - 1) > absmax)
        --e;
      step = std::ldexp(1.0, e - 15);
    }
    if (steps != nullptr)
      steps->push_back(static_cast<float>(step));
    for (int64_t i = b0; i < end; ++i) {
      const double q = std::clamp(std::nearbyint(x[i] / step), -32768.0, 32767.0);
      out[static_cast<size_t>(i)] = q * step;
      if (codes != nullptr)
        codes->push_back(static_cast<int>(q));
    }
  }
  return out;
}

// Weight-only references: float64 products of the exact dequantized weight with x on the activation grid (the GEMV
// and scalar math) and with x rounded to bf16 (the GEMM tiles), and their tolerances. The grid sums are exact integers
// per segment; their f32 scaling and the zero points taken off per group (cancellation against scale * zero * sum x)
// leave f32 error that grows with those terms. GEMM rounds the weights to bf16 (2^-9 relative each). tol_any covers
// either algorithm against ref_bf16.
struct weight_only_reference {
  std::vector<double> ref_grid, tol_grid, ref_bf16, tol_gemm, tol_any;
};

weight_only_reference reference_weight_only(const std::vector<float>& x, int64_t n_tokens, const quantized_linear& w,
                                            const float* bias) {
  weight_only_reference r;
  const auto n = static_cast<size_t>(n_tokens * w.n_out);
  for (auto* v : {&r.ref_grid, &r.tol_grid, &r.ref_bf16, &r.tol_gemm, &r.tol_any})
    v->resize(n);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const std::vector<double> grid = reference_grid(x.data() + t * w.n_in, w.n_in);
    for (int64_t o = 0; o < w.n_out; ++o) {
      const double b = bias != nullptr ? bias[o] : 0.0;
      double acc_grid = b, acc_bf16 = b, mag_grid = std::fabs(b), mag_zero = 0, mag_bf16 = std::fabs(b), apart = 0;
      for (int64_t i = 0; i < w.n_in; ++i) {
        const float xv = x[static_cast<size_t>(t * w.n_in + i)];
        const double xg = grid[static_cast<size_t>(i)], xb = bf16_of(xv);
        const double wv = w.dequantized(o, i);
        const auto g = static_cast<size_t>(o * w.n_groups() + i / w.group_size);
        acc_grid += xg * wv;
        acc_bf16 += xb * wv;
        mag_grid += std::fabs(xg * wv);
        mag_bf16 += std::fabs(xb * wv);
        mag_zero += std::fabs(xg) * std::fabs(static_cast<double>(w.scales[g])) * w.zeros[g];
        apart += std::fabs(wv) * std::fabs(xg - xb);
      }
      const auto k = static_cast<size_t>(t * w.n_out + o);
      r.ref_grid[k] = acc_grid;
      r.ref_bf16[k] = acc_bf16;
      r.tol_grid[k] = 1e-6 + 4e-6 * (mag_grid + 2 * mag_zero);
      r.tol_gemm[k] = 1e-6 + 4e-6 * mag_bf16 + std::ldexp(1.0, -8) * mag_bf16;
      r.tol_any[k] = r.tol_gemm[k] + r.tol_grid[k] + apart;
    }
  }
  return r;
}

// W8A8 reference, written apart from the library: vLLM's dynamic per-token quantization (scale absmax / 127, codes
// x * (127 / absmax) rounded to nearest even and saturated, NaN to 0), exact int64 group sums, the float epilogue
// acc = fma(scale_w, float(isum), acc) per group, y = fma(scale_x, acc, bias).
float reference_quantize(const float* x, int64_t n, std::vector<int>& q) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    absmax = std::fmax(absmax, std::fabs(x[i]));
  const float inv = 127.0f / absmax;
  q.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float p = x[i] * inv;
    const float r = std::isnan(p) ? 0.0f : std::nearbyint(std::fmin(std::fmax(p, -128.0f), 127.0f));
    q[static_cast<size_t>(i)] = static_cast<int>(r);
  }
  return absmax / 127.0f;
}

std::vector<float> reference_w8a8(const std::vector<float>& x, int64_t n_tokens, const quantized_linear& w,
                                  const float* bias) {
  std::vector<float> y(static_cast<size_t>(n_tokens * w.n_out));
  std::vector<int> q;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float sx = reference_quantize(x.data() + t * w.n_in, w.n_in, q);
    for (int64_t o = 0; o < w.n_out; ++o) {
      float acc = 0.0f;
      for (int64_t g = 0; g < w.n_groups(); ++g) {
        int64_t isum = 0;
        for (int64_t i = g * w.group_size; i < (g + 1) * w.group_size; ++i)
          isum += static_cast<int64_t>(q[static_cast<size_t>(i)]) *
                  (static_cast<int64_t>(w.codes[static_cast<size_t>(o * w.n_in + i)]) - 128);
        acc = std::fma(w.scales[static_cast<size_t>(o * w.n_groups() + g)], static_cast<float>(isum), acc);
      }
      y[static_cast<size_t>(t * w.n_out + o)] = std::fma(sx, acc, bias != nullptr ? bias[o] : 0.0f);
    }
  }
  return y;
}

// The float64 product of the dequantized weight and x (not rounded), and how far W8A8 may be from it: half a step of
// each token's int8 grid times the weights' absolute sum, plus f32 rounding.
void float64_product(const std::vector<float>& x, int64_t n_tokens, const quantized_linear& w, const float* bias,
                     std::vector<double>& ref, std::vector<double>& tol) {
  ref.assign(static_cast<size_t>(n_tokens * w.n_out), 0.0);
  tol.assign(ref.size(), 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    float absmax = 0.0f;
    for (int64_t i = 0; i < w.n_in; ++i)
      absmax = std::fmax(absmax, std::fabs(x[static_cast<size_t>(t * w.n_in + i)]));
    for (int64_t o = 0; o < w.n_out; ++o) {
      double acc = bias != nullptr ? bias[o] : 0.0, wabs = 0, mag = 0;
      for (int64_t i = 0; i < w.n_in; ++i) {
        const double wv = w.dequantized(o, i);
        acc += wv * x[static_cast<size_t>(t * w.n_in + i)];
        wabs += std::fabs(wv);
        mag += std::fabs(wv * x[static_cast<size_t>(t * w.n_in + i)]);
      }
      ref[static_cast<size_t>(t * w.n_out + o)] = acc;
      tol[static_cast<size_t>(t * w.n_out + o)] = 0.51 * absmax / 127.0 * wabs + 1e-5 * mag + 1e-6;
    }
  }
}

size_t n_y(const weight_only_reference& r) { return r.ref_bf16.size(); }

std::string describe_case(const quantized_linear& w, int64_t n_tokens, bool bias, matmul_path path,
                          quantized_kernels k) {
  return w.describe() + " tokens " + std::to_string(n_tokens) + (bias ? " +bias" : "") + " path " +
         std::to_string(static_cast<int>(path)) + " kernels " + family_name(k);
}

// Runs one weight through matmul_quantized on every family and path and checks it.
void check_weight(const quantized_linear& w, int64_t n_tokens, bool with_bias, matmul_path path, thread_pool& pool,
                  uint64_t seed) {
  const auto x = make_input(n_tokens, w.n_in, seed);
  const auto bias = test::random_floats(static_cast<size_t>(w.n_out), seed + 1);
  const float* b = with_bias ? bias.data() : nullptr;
  const auto panels = cpu::pack_quantized(w, pool);
  const bool w8a8 = w.activations == activation_quant::int8_per_token;
  weight_only_reference wo;
  std::vector<float> exact;
  std::vector<double> loose_ref, loose_tol;
  if (w8a8) {
    exact = reference_w8a8(x, n_tokens, w, b);
    float64_product(x, n_tokens, w, b, loose_ref, loose_tol);
  } else {
    wo = reference_weight_only(x, n_tokens, w, b);
  }
  for (quantized_kernels k : families()) {
    const family_scope scope(k);
    const size_t n_y = static_cast<size_t>(n_tokens * w.n_out);
    std::vector<float> y(n_y + 29, -777.0f);  // sentinels catch writes past the output
    const cpu::quantized_target target{panels.get(), b, y.data()};
    cpu::matmul_quantized(x.data(), n_tokens, w.n_in, std::span{&target, 1}, pool, path);
    const std::string what = describe_case(w, n_tokens, with_bias, path, k);
    INFO(what);
    for (size_t i = n_y; i < y.size(); ++i)
      REQUIRE(y[i] == -777.0f);
    if (w8a8) {
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < n_y; ++i)
        if (std::memcmp(&y[i], &exact[i], sizeof(float)) != 0 && bad++ == 0)
          first = i;
      INFO("first difference at " << first << ": got " << y[first] << " reference " << exact[first]);
      CHECK(bad == 0);
      test::check_close(y.data(), loose_ref.data(), n_y, loose_tol.data(), 0.0, 1e-6, what + " against float64");
      continue;
    }
    // The vector kernels take GEMM for many tokens (automatic) or when asked; the scalar path has one algorithm.
    const bool gemm =
        k == quantized_kernels::best && cpu::quantized_vector_format(w.activations, w.n_in, w.group_size) &&
        (path == matmul_path::gemm || (path == matmul_path::automatic && n_tokens >= cpu::matmul_gemm_min_tokens));
    if (gemm)
      test::check_close(y.data(), wo.ref_bf16.data(), n_y, wo.tol_gemm.data(), 0.0, 1e-6, what);
    else
      test::check_close(y.data(), wo.ref_grid.data(), n_y, wo.tol_grid.data(), 0.0, 1e-6, what);
  }
}

// The formats of the weight-only tests: {bits, n_in, group (0: per channel)}. Groups of 32 and 64 on rows that are
// not a multiple of 64 or 128, a group of 96 (neither 32, 64 nor whole blocks), per channel on rows not a multiple
// of 32, and a group of 16, which only the scalar path takes.
struct qformat {
  int bits;
  int64_t n_in, group;
};
const std::vector<qformat> weight_only_formats = {
    {4, 256, 128}, {4, 96, 32}, {4, 320, 64}, {4, 288, 96}, {4, 100, 0}, {4, 512, 256}, {8, 256, 128},  {8, 160, 32},
    {8, 192, 64},  {8, 200, 0}, {8, 288, 96}, {4, 48, 16},  {8, 640, 0}, {4, 384, 0},   {8, 1024, 512},
};

}  // namespace

TEST_CASE("quantized_panels lays out every code and parameter where the kernels read them [asan]") {
  thread_pool pool(2);
  for (const qformat& f : weight_only_formats) {
    const quantized_linear w = make_weight(f.bits, 7, f.n_in, f.group, maker::hand_made, activation_quant::none, 3);
    const auto p = cpu::pack_quantized(w, pool);
    INFO(w.describe());
    CHECK(p->layout() == (f.bits == 4 ? tensor_layout::cpu_q4 : tensor_layout::cpu_q8));
    CHECK(p->k_pad() % 128 == 0);
    CHECK(p->k_pad() >= w.n_in);
    CHECK(p->size() >= w.packed_bytes());
    CHECK(p->size() < static_cast<size_t>(w.n_out * p->k_pad()) * 2);  // less than the bf16 weight
    for (int64_t o = 0; o < w.n_out; ++o) {
      for (int64_t i = 0; i < w.n_in; ++i)
        REQUIRE(p->code(o, i) == w.codes[static_cast<size_t>(o * w.n_in + i)]);
      for (int64_t i = w.n_in; i < p->k_pad(); ++i)
        REQUIRE(p->code(o, i) == 0);
      for (int64_t g = 0; g < w.n_groups(); ++g) {
        REQUIRE(p->row_scales(o)[g] == w.scales[static_cast<size_t>(o * w.n_groups() + g)]);
        REQUIRE(p->row_zeros(o)[g] == w.zeros[static_cast<size_t>(o * w.n_groups() + g)]);
      }
    }
  }
  // The order itself. 4-bit: input 32 c + m of a block is nibble c of 16-bit word m. 8-bit: input 64 h + 32 c + m is
  // byte c of word m of half h.
  const quantized_linear w4 = make_weight(4, 1, 256, 128, maker::hand_made, activation_quant::none, 4);
  const auto p4 = cpu::pack_quantized(w4, pool);
  const quantized_linear w8 = make_weight(8, 1, 256, 0, maker::hand_made, activation_quant::none, 5);
  const auto p8 = cpu::pack_quantized(w8, pool);
  for (int64_t i = 0; i < 256; ++i) {
    const int64_t b = i / 128, q = i % 128;
    uint16_t word4 = 0, word8 = 0;
    std::memcpy(&word4, p4->row_codes(0) + b * 64 + 2 * (q % 32), sizeof word4);
    REQUIRE(((word4 >> (4 * (q / 32))) & 15) == w4.codes[static_cast<size_t>(i)]);
    std::memcpy(&word8, p8->row_codes(0) + b * 128 + (q / 64) * 64 + 2 * (q % 32), sizeof word8);
    REQUIRE(((word8 >> (8 * ((q % 64) / 32))) & 255) == w8.codes[static_cast<size_t>(i)]);
  }
  // W8A8: signed codes, and 128 times their sum per group.
  const quantized_linear wa = make_weight(8, 5, 192, 64, maker::hand_made, activation_quant::int8_per_token, 6);
  const auto pa = cpu::pack_quantized(wa, pool);
  CHECK(pa->k_pad() == 192);
  for (int64_t o = 0; o < wa.n_out; ++o)
    for (int64_t g = 0; g < wa.n_groups(); ++g) {
      int32_t sum = 0;
      for (int64_t i = g * 64; i < (g + 1) * 64; ++i) {
        REQUIRE(pa->code(o, i) == wa.codes[static_cast<size_t>(o * wa.n_in + i)]);
        REQUIRE(static_cast<int8_t>(pa->row_codes(o)[i]) == wa.codes[static_cast<size_t>(o * wa.n_in + i)] - 128);
        sum += wa.codes[static_cast<size_t>(o * wa.n_in + i)] - 128;
      }
      REQUIRE(pa->row_code_sums(o)[g] == 128 * sum);
    }
}

TEST_CASE("quantize_row_int16 puts each block of 128 inputs on a 16-bit grid of a power-of-two step [asan]") {
  std::vector<float> x = test::random_floats(300, 77, -3.0f, 3.0f);
  for (int64_t i = 128; i < 256; ++i)  // a block of small values, one of them the block's largest
    x[static_cast<size_t>(i)] *= 1e-3f;
  x[130] = 1.0f - 0x1p-17f;  // largest of its block: 32767.75 steps, saturated to 32767
  x[140] = -0.75f;
  std::vector<int16_t> q(300);
  std::vector<float> steps(3);
  cpu::quantize_row_int16(x.data(), 300, q.data(), steps.data());
  std::vector<int> want;
  std::vector<float> want_steps;
  reference_grid(x.data(), 300, &want, &want_steps);
  CHECK(steps == want_steps);
  CHECK(steps[1] == 0x1p-15f);
  for (size_t i = 0; i < 300; ++i) {
    INFO(i);
    REQUIRE(q[i] == want[i]);
  }
  CHECK(q[130] == 32767);
  CHECK(q[140] == -24576);
  // Every value keeps at least bf16's precision (2^-9 relative) when within 2^6 of its block's largest.
  for (size_t b = 0; b < 3; ++b) {
    float absmax = 0;
    for (size_t i = 128 * b; i < std::min<size_t>(300, 128 * b + 128); ++i)
      absmax = std::max(absmax, std::fabs(x[i]));
    for (size_t i = 128 * b; i < std::min<size_t>(300, 128 * b + 128); ++i)
      if (std::fabs(x[i]) * 64 >= absmax)
        CHECK(std::fabs(q[i] * static_cast<double>(steps[b]) - x[i]) <= std::ldexp(std::fabs(x[i]), -9));
  }
  // A non-finite value: the block's step is NaN (its codes 0), and the product over it NaN, as a float product's.
  x[200] = std::numeric_limits<float>::infinity();
  cpu::quantize_row_int16(x.data(), 300, q.data(), steps.data());
  CHECK(std::isnan(steps[1]));
  CHECK_FALSE(std::isnan(steps[0]));
  for (size_t i = 128; i < 256; ++i)
    REQUIRE(q[i] == 0);
  thread_pool pool(2);
  const auto panels = cpu::pack_quantized(make_weight(4, 5, 300, 0, maker::hand_made, activation_quant::none, 8), pool);
  for (quantized_kernels k : families()) {
    const family_scope scope(k);
    std::vector<float> y(5);
    const cpu::quantized_target t{panels.get(), nullptr, y.data()};
    cpu::matmul_quantized(x.data(), 1, 300, std::span{&t, 1}, pool);
    for (float v : y)
      CHECK(std::isnan(v));
  }
  // A block of zeros: step 1, codes 0; the last block (44 inputs) is as long as what is left.
  std::vector<float> zeros(44, 0.0f);
  float step = 0;
  cpu::quantize_row_int16(zeros.data(), 44, q.data(), &step);
  CHECK(step == 1.0f);
  for (int i = 0; i < 44; ++i)
    CHECK(q[static_cast<size_t>(i)] == 0);
}

TEST_CASE("quantize_row_int8 is vLLM's dynamic per-token int8 quantization [asan]") {
  std::vector<int8_t> q(9);
  std::vector<int> ref;
  // absmax 127: the codes are x rounded, ties to even.
  const std::vector<float> x = {127.0f, -127.0f, 0.0f, 63.5f, -0.5f, 0.5f, 1.5f, 2.5f, -63.5f};
  const float scale = cpu::quantize_row_int8(x.data(), 9, q.data());
  CHECK(scale == 1.0f);
  CHECK(reference_quantize(x.data(), 9, ref) == scale);
  const std::vector<int> want = {127, -127, 0, 64, 0, 0, 2, 2, -64};
  for (size_t i = 0; i < x.size(); ++i) {
    INFO(i);
    CHECK(q[i] == want[i]);
    CHECK(ref[i] == want[i]);
  }
  // A row of zeros: scale 0, codes 0. NaN is ignored by the max and becomes 0.
  const std::vector<float> zeros(5, 0.0f);
  CHECK(cpu::quantize_row_int8(zeros.data(), 5, q.data()) == 0.0f);
  for (int i = 0; i < 5; ++i)
    CHECK(q[static_cast<size_t>(i)] == 0);
  const std::vector<float> with_nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), -0.5f};
  CHECK(cpu::quantize_row_int8(with_nan.data(), 3, q.data()) == 1.0f / 127.0f);
  CHECK(q[0] == 127);
  CHECK(q[1] == 0);
  CHECK(q[2] == -64);  // -63.5 to even
}

TEST_CASE("weight-only quantized GEMV matches float64 for int4 and int8 formats [asan]") {
  thread_pool pool(3);
  uint64_t seed = 100;
  for (const qformat& f : weight_only_formats)
    for (maker how : {maker::rtn_asymmetric, maker::hand_made})
      for (int64_t n_tokens : {1, 2, 3, 5})
        for (int64_t n_out : {1, 13, 37}) {
          const quantized_linear w = make_weight(f.bits, n_out, f.n_in, f.group, how, activation_quant::none, seed++);
          check_weight(w, n_tokens, n_out != 13, matmul_path::gemv, pool, seed++);
        }
}

// One token reads each weight as several row streams walked side by side (and 4-bit whole-block groups on vpdpbusd),
// two and five tokens read consecutive rows on vpdpwssd: the exact integer sums per lane are the same, so every token
// of identical ones equals the single token bit for bit. Checked over row counts that leave the streams
// uneven, pool sizes that cut the rows into different chunks, one target, three targets and a gated pair; every output
// written once and nothing past it.
TEST_CASE(
    "one token equals the first of two and of five identical tokens bit for bit, streamed or not, its rows read "
    "ahead or not [asan]") {
  uint64_t seed = 900;
  std::vector<qformat> formats = weight_only_formats;
  for (const qformat& f : {qformat{8, 256, 128}, qformat{8, 192, 0}})
    formats.push_back({-f.bits, f.n_in, f.group});  // negative bits: W8A8
  // The one-token tiles' reads ahead (decode_read_pattern::quantized_prefetch_bytes: Intel's 1 KiB, and none), each
  // way on every CPU (a build without the bf16 kernels keeps its CPU's pattern: both rounds then read alike).
  struct pattern_scope {
    explicit pattern_scope(int64_t ahead) {
      cpu::decode_read_pattern p = cpu::decode_read_pattern_for(cpu::cpu_vendor(), cpu::cpu_family());
      p.quantized_prefetch_bytes = ahead;
      cpu::set_decode_read_pattern(p);
    }
    ~pattern_scope() { cpu::set_decode_read_pattern(std::nullopt); }
    pattern_scope(const pattern_scope&) = delete;
    pattern_scope& operator=(const pattern_scope&) = delete;
  };
  for (int64_t ahead : {int64_t{1024}, int64_t{0}})
    for (int threads : {1, 2, 3}) {
      const pattern_scope read_ahead(ahead);
      INFO("reads ahead " << ahead << " bytes");
      thread_pool pool(threads);
      for (const qformat& f : formats) {
        const int bits = std::abs(f.bits);
        const activation_quant act = f.bits < 0 ? activation_quant::int8_per_token : activation_quant::none;
        const auto x1 = make_input(1, f.n_in, seed++);
        std::vector<float> x2 = x1, x5;
        x2.insert(x2.end(), x1.begin(), x1.end());
        for (int i = 0; i < 5; ++i)
          x5.insert(x5.end(), x1.begin(), x1.end());
        for (int64_t n_out : {1, 2, 3, 5, 6, 7, 9, 13, 37, 101}) {
          const quantized_linear wa = make_weight(bits, n_out, f.n_in, f.group, maker::hand_made, act, seed++);
          const quantized_linear wb = make_weight(bits, n_out + 3, f.n_in, f.group, maker::hand_made, act, seed++);
          const quantized_linear wc = make_weight(bits, n_out, f.n_in, f.group, maker::hand_made, act, seed++);
          const auto pa = cpu::pack_quantized(wa, pool), pb = cpu::pack_quantized(wb, pool),
                     pc = cpu::pack_quantized(wc, pool);
          const auto bias = test::random_floats(static_cast<size_t>(n_out + 3), seed++);
          for (quantized_kernels k : families()) {
            const family_scope scope(k);
            INFO(wa.describe() << " n_out " << n_out << " threads " << threads << " " << family_name(k));
            // Three targets: one token, then two.
            const std::array<const cpu::quantized_panels*, 3> ws = {pa.get(), pb.get(), pc.get()};
            std::array<std::vector<float>, 3> one, two;
            std::array<cpu::quantized_target, 3> t1, t2;
            for (size_t i = 0; i < 3; ++i) {
              const auto n = static_cast<size_t>(ws[i]->n_out());
              one[i].assign(n + 8, -777.0f);
              two[i].assign(2 * n, -555.0f);
              t1[i] = {ws[i], i == 1 ? bias.data() : nullptr, one[i].data()};
              t2[i] = {ws[i], i == 1 ? bias.data() : nullptr, two[i].data()};
            }
            for (size_t n_targets : {size_t{1}, size_t{3}}) {
              cpu::matmul_quantized(x1.data(), 1, f.n_in, std::span{t1.data(), n_targets}, pool);
              cpu::matmul_quantized(x2.data(), 2, f.n_in, std::span{t2.data(), n_targets}, pool);
              for (size_t i = 0; i < n_targets; ++i) {
                const auto n = static_cast<size_t>(ws[i]->n_out());
                CHECK(std::memcmp(one[i].data(), two[i].data(), n * sizeof(float)) == 0);
                CHECK(std::memcmp(two[i].data(), two[i].data() + n, n * sizeof(float)) == 0);
                for (size_t j = n; j < n + 8; ++j)
                  REQUIRE(one[i][j] == -777.0f);
              }
            }
            // Five tokens (consecutive tiles for every format) against the first of two (streamed where the format is).
            {
              const auto n = static_cast<size_t>(pa->n_out());
              std::vector<float> five(5 * n), five_up(5 * n), five_out(5 * n), two_out(2 * n), two_up(2 * n);
              const cpu::quantized_target t5{pa.get(), nullptr, five.data()}, t2b{pa.get(), nullptr, two[0].data()};
              cpu::matmul_quantized(x5.data(), 5, f.n_in, std::span{&t5, 1}, pool);
              cpu::matmul_quantized(x2.data(), 2, f.n_in, std::span{&t2b, 1}, pool);
              CHECK(std::memcmp(five.data(), two[0].data(), n * sizeof(float)) == 0);
              cpu::matmul_quantized_silu_gate(x5.data(), 5, f.n_in, *pa, *pc, five_up.data(), five_out.data(), pool);
              cpu::matmul_quantized_silu_gate(x2.data(), 2, f.n_in, *pa, *pc, two_up.data(), two_out.data(), pool);
              CHECK(std::memcmp(five_out.data(), two_out.data(), 2 * n * sizeof(float)) == 0);
            }
            // A gated pair (gate a, up c).
            const auto n = static_cast<size_t>(n_out);
            std::vector<float> up1(n), out1(n + 8, -777.0f), up2(2 * n), out2(2 * n, -555.0f);
            cpu::matmul_quantized_silu_gate(x1.data(), 1, f.n_in, *pa, *pc, up1.data(), out1.data(), pool);
            cpu::matmul_quantized_silu_gate(x2.data(), 2, f.n_in, *pa, *pc, up2.data(), out2.data(), pool);
            CHECK(std::memcmp(out1.data(), out2.data(), n * sizeof(float)) == 0);
            for (size_t j = n; j < n + 8; ++j)
              REQUIRE(out1[j] == -777.0f);
          }
        }
      }
    }
}

TEST_CASE("weight-only quantized GEMV covers token tiles up to 40 tokens and Llama-sized rows") {
  thread_pool pool(2);
  uint64_t seed = 200;
  for (int64_t n_tokens : {8, 17, 32, 40})
    for (const qformat& f : {qformat{4, 256, 128}, qformat{8, 192, 64}, qformat{4, 96, 32}}) {
      const quantized_linear w =
          make_weight(f.bits, 35, f.n_in, f.group, maker::rtn_symmetric, activation_quant::none, seed++);
      check_weight(w, n_tokens, true, matmul_path::automatic, pool, seed++);
    }
  for (const qformat& f : {qformat{4, 2048, 128}, qformat{8, 2048, 0}, qformat{4, 5632, 64}}) {
    const quantized_linear w =
        make_weight(f.bits, 67, f.n_in, f.group, maker::rtn_asymmetric, activation_quant::none, seed++);
    check_weight(w, 3, false, matmul_path::automatic, pool, seed++);
  }
}

TEST_CASE("weight-only quantized GEMM matches float64 and covers token chunks [asan]") {
  thread_pool pool(3);
  uint64_t seed = 300;
  for (const qformat& f : weight_only_formats)
    for (int64_t n_tokens : {7, 100})
      for (int64_t n_out : {33, 64}) {
        const quantized_linear w =
            make_weight(f.bits, n_out, f.n_in, f.group, maker::hand_made, activation_quant::none, seed++);
        check_weight(w, n_tokens, n_out == 33, matmul_path::gemm, pool, seed++);
      }
  // The automatic choice on both sides of the crossover, and more tokens than one chunk of 384.
  for (int64_t n_tokens : {cpu::matmul_gemm_min_tokens - 1, cpu::matmul_gemm_min_tokens, int64_t{130}, int64_t{400}}) {
    const quantized_linear w =
        make_weight(n_tokens % 2 == 0 ? 4 : 8, 45, 256, 128, maker::rtn_asymmetric, activation_quant::none, seed++);
    check_weight(w, n_tokens, true, matmul_path::automatic, pool, seed++);
  }
}

TEST_CASE("weight-only quantized GEMM equals the bf16 panels of the dequantized weight bit for bit [asan]") {
  if (!cpu::have_quantized_avx512_kernels() || !cpu::have_bf16_dot_kernels())
    return;
  thread_pool pool(2);
  uint64_t seed = 350;
  for (const qformat& f : {qformat{4, 256, 128}, qformat{8, 160, 32}, qformat{4, 100, 0}, qformat{8, 288, 96}}) {
    const quantized_linear w = make_weight(f.bits, 45, f.n_in, f.group, maker::hand_made, activation_quant::none, seed);
    const int64_t n_tokens = 100;
    const auto x = test::random_floats(static_cast<size_t>(n_tokens * w.n_in), seed + 1, -2.0f, 2.0f);
    const auto bias = test::random_floats(static_cast<size_t>(w.n_out), seed + 2);
    seed += 10;
    const tensor bf16 = dequantize_to_bf16(w);
    std::vector<uint16_t> panels(cpu::bf16_panels_bytes(w.n_out, w.n_in) / 2);
    cpu::pack_bf16_panels(bf16.data_as<uint16_t>(), w.n_out, w.n_in, panels.data(), pool);
    std::vector<float> want(static_cast<size_t>(n_tokens * w.n_out)), got(want.size());
    const cpu::matmul_target t{panels.data(), dtype::bf16, w.n_out, bias.data(), want.data(), true};
    cpu::matmul_group(x.data(), n_tokens, w.n_in, std::span{&t, 1}, pool);
    const auto q = cpu::pack_quantized(w, pool);
    const cpu::quantized_target qt{q.get(), bias.data(), got.data()};
    cpu::matmul_quantized(x.data(), n_tokens, w.n_in, std::span{&qt, 1}, pool, matmul_path::gemm);
    INFO(w.describe());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("W8A8 matches the scalar integer reference bit for bit on every path [asan]") {
  thread_pool pool(3);
  uint64_t seed = 400;
  // {n_in, group}: per channel on rows not a multiple of 64, groups of 64 and 128, and a group of 32, which only the
  // scalar path takes.
  const std::vector<qformat> formats = {{8, 100, 0}, {8, 192, 64}, {8, 256, 128}, {8, 96, 32}, {8, 640, 0}};
  for (const qformat& f : formats)
    for (maker how : {maker::rtn_symmetric, maker::hand_made})
      for (int64_t n_tokens : {1, 2, 3, 4, 5, 9, 40})
        for (int64_t n_out : {1, 13, 37}) {
          const quantized_linear w =
              make_weight(8, n_out, f.n_in, f.group, how, activation_quant::int8_per_token, seed++);
          check_weight(w, n_tokens, n_out != 1, matmul_path::automatic, pool, seed++);
        }
  // Prefill sizes: token rows in more than one chunk of 128.
  for (int64_t n_tokens : {100, 131}) {
    const quantized_linear w = make_weight(8, 29, 192, 64, maker::hand_made, activation_quant::int8_per_token, seed++);
    check_weight(w, n_tokens, true, matmul_path::automatic, pool, seed++);
  }
  // Extremes: codes at both ends, a token of zeros and one with a single large value.
  quantized_linear w = make_weight(8, 5, 128, 0, maker::hand_made, activation_quant::int8_per_token, seed++);
  for (size_t i = 0; i < w.codes.size(); ++i)
    w.codes[i] = i % 3 == 0 ? uint8_t{0} : i % 3 == 1 ? uint8_t{255} : w.codes[i];
  std::vector<float> x(3 * 128, 0.0f);
  for (int64_t i = 0; i < 128; ++i)
    x[static_cast<size_t>(128 + i)] = i == 77 ? 1000.0f : 0.001f * static_cast<float>(i);
  for (int64_t i = 0; i < 128; ++i)
    x[static_cast<size_t>(256 + i)] = i % 2 == 0 ? -1.0f : 1.0f;
  const auto exact = reference_w8a8(x, 3, w, nullptr);
  const auto panels = cpu::pack_quantized(w, pool);
  for (quantized_kernels k : families()) {
    const family_scope scope(k);
    std::vector<float> y(15);
    const cpu::quantized_target t{panels.get(), nullptr, y.data()};
    cpu::matmul_quantized(x.data(), 3, 128, std::span{&t, 1}, pool);
    INFO(family_name(k));
    CHECK(std::memcmp(y.data(), exact.data(), y.size() * sizeof(float)) == 0);
    for (int o = 0; o < 5; ++o)
      CHECK(y[static_cast<size_t>(o)] == 0.0f);
  }
}

TEST_CASE("matmul_quantized with three q/k/v-like targets gives each target's own result [asan]") {
  thread_pool pool(3);
  uint64_t seed = 500;
  for (int64_t n_tokens : {1, 6, 100}) {
    const int64_t n_in = 256;
    // int4 g128 q, int4 per-channel k, int8 g64 v; then the same with a W8A8 and a scalar-only target mixed in.
    std::vector<quantized_linear> ws = {
        make_weight(4, 64, n_in, 128, maker::rtn_asymmetric, activation_quant::none, seed++),
        make_weight(4, 16, n_in, 0, maker::hand_made, activation_quant::none, seed++),
        make_weight(8, 19, n_in, 64, maker::hand_made, activation_quant::none, seed++),
        make_weight(8, 9, n_in, 128, maker::hand_made, activation_quant::int8_per_token, seed++),
        make_weight(4, 11, n_in, 16, maker::hand_made, activation_quant::none, seed++),
    };
    const auto x = make_input(n_tokens, n_in, seed++);
    const auto bias = test::random_floats(64, seed++);
    for (size_t n_targets : {size_t{3}, size_t{5}})
      for (quantized_kernels k : families()) {
        const family_scope scope(k);
        std::vector<std::shared_ptr<cpu::quantized_panels>> panels;
        std::vector<std::vector<float>> y, alone;
        std::vector<cpu::quantized_target> targets;
        for (size_t i = 0; i < n_targets; ++i) {
          panels.push_back(cpu::pack_quantized(ws[i], pool));
          y.emplace_back(static_cast<size_t>(n_tokens * ws[i].n_out), -777.0f);
          alone.emplace_back(y.back().size(), -555.0f);
        }
        for (size_t i = 0; i < n_targets; ++i)
          targets.push_back({panels[i].get(), i % 2 == 0 ? bias.data() : nullptr, y[i].data()});
        cpu::matmul_quantized(x.data(), n_tokens, n_in, targets, pool);
        for (size_t i = 0; i < n_targets; ++i) {
          const cpu::quantized_target one{panels[i].get(), targets[i].bias, alone[i].data()};
          cpu::matmul_quantized(x.data(), n_tokens, n_in, std::span{&one, 1}, pool);
          INFO("target " << i << " of " << n_targets << " " << ws[i].describe() << " tokens " << n_tokens << " "
                         << family_name(k));
          CHECK(std::memcmp(y[i].data(), alone[i].data(), y[i].size() * sizeof(float)) == 0);
          if (ws[i].activations == activation_quant::none) {
            const auto r = reference_weight_only(x, n_tokens, ws[i], targets[i].bias);
            const bool gemm = k == quantized_kernels::best && n_tokens >= cpu::matmul_gemm_min_tokens &&
                              cpu::quantized_vector_format(ws[i].activations, n_in, ws[i].group_size);
            if (gemm)
              test::check_close(y[i].data(), r.ref_bf16.data(), n_y(r), r.tol_gemm.data(), 0.0, 1e-6, "group target");
            else
              test::check_close(y[i].data(), r.ref_grid.data(), n_y(r), r.tol_grid.data(), 0.0, 1e-6, "group target");
          } else {
            CHECK(y[i] == reference_w8a8(x, n_tokens, ws[i], targets[i].bias));
          }
        }
      }
  }
}

TEST_CASE("matmul_quantized_silu_gate equals silu(x gate^T) * (x up^T) for every format [asan]") {
  thread_pool pool(2);
  uint64_t seed = 600;
  const std::vector<qformat> formats = {{4, 256, 128}, {8, 192, 64}, {4, 100, 0}, {4, 64, 16}};
  for (const qformat& f : formats)
    for (int64_t n_tokens : {1, 3, 100})
      for (activation_quant act : {activation_quant::none, activation_quant::int8_per_token}) {
        if (act == activation_quant::int8_per_token && f.bits != 8)
          continue;
        const int64_t n_ff = 45;
        const quantized_linear wg = make_weight(f.bits, n_ff, f.n_in, f.group, maker::hand_made, act, seed++);
        const quantized_linear wu = make_weight(f.bits, n_ff, f.n_in, f.group, maker::hand_made, act, seed++);
        const auto x = make_input(n_tokens, f.n_in, seed++);
        std::vector<double> ref, tol;
        if (act == activation_quant::none) {
          const auto g = reference_weight_only(x, n_tokens, wg, nullptr);
          const auto u = reference_weight_only(x, n_tokens, wu, nullptr);
          test::silu_gate_reference(g.ref_bf16, g.tol_any, u.ref_bf16, u.tol_any, ref, tol);
        } else {
          // silu of the exact W8A8 gate times the exact up, in float64: only the f32 silu differs (and underflows
          // where the gate is very negative).
          const auto g = reference_w8a8(x, n_tokens, wg, nullptr);
          const auto u = reference_w8a8(x, n_tokens, wu, nullptr);
          const std::vector<double> gd(g.begin(), g.end()), ud(u.begin(), u.end()), f32_slack(g.size(), 1e-6);
          test::silu_gate_reference(gd, f32_slack, ud, f32_slack, ref, tol);
        }
        const auto pg = cpu::pack_quantized(wg, pool), pu = cpu::pack_quantized(wu, pool);
        for (quantized_kernels k : families()) {
          const family_scope scope(k);
          std::vector<float> up(static_cast<size_t>(n_tokens * n_ff)), out(up.size() + 19, -777.0f);
          cpu::matmul_quantized_silu_gate(x.data(), n_tokens, f.n_in, *pg, *pu, up.data(), out.data(), pool);
          const std::string what =
              "silu gate " + wg.describe() + " tokens " + std::to_string(n_tokens) + " " + family_name(k);
          test::check_close(out.data(), ref.data(), ref.size(), tol.data(), 0.0, 1e-6, what);
          for (size_t i = ref.size(); i < out.size(); ++i)
            REQUIRE(out[i] == -777.0f);
        }
      }
}

TEST_CASE("cpu_backend import_quantized_linear runs matmul and matmul_group and matmul_silu_gate on the codes [asan]") {
  cpu::cpu_backend b(2);
  uint64_t seed = 700;
  const int64_t n_in = 256;
  for (int64_t n_tokens : {1, 5, 100}) {
    const std::vector<quantized_linear> ws = {
        make_weight(4, 40, n_in, 128, maker::rtn_asymmetric, activation_quant::none, seed++),
        make_weight(8, 24, n_in, 0, maker::hand_made, activation_quant::none, seed++),
        make_weight(8, 24, n_in, 64, maker::hand_made, activation_quant::int8_per_token, seed++),
    };
    const auto xv = make_input(n_tokens, n_in, seed++);
    const tensor x = b.alloc(dtype::f32, {n_tokens, n_in});
    b.upload(x, xv.data(), xv.size() * sizeof(float));
    const auto bias_v = test::random_floats(40, seed++);
    std::vector<tensor> w, y;
    std::vector<linear_out> outs;
    for (const quantized_linear& q : ws) {
      const tensor t = b.import_quantized_linear(q);
      INFO(q.describe());
      const bool vector = cpu::have_quantized_avx512_kernels() || q.activations != activation_quant::none;
      if (vector) {
        CHECK(t.layout == (q.bits == 4 ? tensor_layout::cpu_q4 : tensor_layout::cpu_q8));
        CHECK(t.buf->size() < t.nbytes());  // the real bytes, not the logical bf16 size
        CHECK(t.buf->size() >= q.packed_bytes());
      }
      CHECK(t.shape == tensor_shape{q.n_out, q.n_in});
      CHECK(t.type == dtype::bf16);
      w.push_back(t);
      y.push_back(b.alloc(dtype::f32, {n_tokens, q.n_out}));
    }
    const tensor bias = b.alloc(dtype::f32, {40});
    b.upload(bias, bias_v.data(), 40 * sizeof(float));
    for (size_t i = 0; i < ws.size(); ++i)
      outs.push_back({w[i], i == 0 ? bias : tensor{}, y[i]});
    b.matmul_group(x, outs);
    for (size_t i = 0; i < ws.size(); ++i) {
      std::vector<float> got(static_cast<size_t>(n_tokens * ws[i].n_out)), single(got.size());
      b.download(y[i], got.data(), got.size() * sizeof(float));
      const tensor y1 = b.alloc(dtype::f32, {n_tokens, ws[i].n_out});
      b.matmul(x, w[i], i == 0 ? bias : tensor{}, y1);
      b.download(y1, single.data(), single.size() * sizeof(float));
      INFO(ws[i].describe() << " tokens " << n_tokens);
      CHECK(std::memcmp(got.data(), single.data(), got.size() * sizeof(float)) == 0);
      if (ws[i].activations == activation_quant::int8_per_token) {
        CHECK(got == reference_w8a8(xv, n_tokens, ws[i], nullptr));
      } else {
        const auto r = reference_weight_only(xv, n_tokens, ws[i], i == 0 ? bias_v.data() : nullptr);
        test::check_close(got.data(), r.ref_bf16.data(), n_y(r), r.tol_any.data(), 0.0, 1e-6, "backend matmul");
      }
    }
    // Gate and up: two int4 weights of one shape.
    const quantized_linear gq = make_weight(4, 24, n_in, 64, maker::hand_made, activation_quant::none, seed++);
    const quantized_linear uq = make_weight(4, 24, n_in, 64, maker::hand_made, activation_quant::none, seed++);
    const tensor gate = b.import_quantized_linear(gq), upw = b.import_quantized_linear(uq);
    const tensor up = b.alloc(dtype::f32, {n_tokens, 24}), out = b.alloc(dtype::f32, {n_tokens, 24});
    b.matmul_silu_gate(x, gate, upw, up, out);
    std::vector<float> got(static_cast<size_t>(n_tokens * 24));
    b.download(out, got.data(), got.size() * sizeof(float));
    const auto g = reference_weight_only(xv, n_tokens, gq, nullptr);
    const auto u = reference_weight_only(xv, n_tokens, uq, nullptr);
    std::vector<double> ref, tol;
    test::silu_gate_reference(g.ref_bf16, g.tol_any, u.ref_bf16, u.tol_any, ref, tol);
    test::check_close(got.data(), ref.data(), ref.size(), tol.data(), 0.0, 1e-6, "backend silu gate");
  }
}

TEST_CASE("the default import_quantized_linear dequantizes to bf16 and agrees with the CPU kernels [asan]") {
  cpu::cpu_backend b(2);
  uint64_t seed = 800;
  for (const qformat& f : {qformat{4, 256, 128}, qformat{8, 192, 0}, qformat{4, 96, 32}})
    for (int64_t n_tokens : {1, 4, 100}) {
      const quantized_linear q =
          make_weight(f.bits, 37, f.n_in, f.group, maker::hand_made, activation_quant::none, seed++);
      const auto xv = make_input(n_tokens, f.n_in, seed++);
      const tensor x = b.alloc(dtype::f32, {n_tokens, f.n_in});
      b.upload(x, xv.data(), xv.size() * sizeof(float));
      const tensor wq = b.import_quantized_linear(q);
      const tensor wd = b.backend::import_quantized_linear(q);  // the interface's default: bf16
      CHECK_FALSE(is_quantized_layout(wd.layout));
      const tensor yq = b.alloc(dtype::f32, {n_tokens, 37}), yd = b.alloc(dtype::f32, {n_tokens, 37});
      b.matmul(x, wq, tensor{}, yq);
      b.matmul(x, wd, tensor{}, yd);
      std::vector<float> got_q(static_cast<size_t>(n_tokens * 37)), got_d(got_q.size());
      b.download(yq, got_q.data(), got_q.size() * sizeof(float));
      b.download(yd, got_d.data(), got_d.size() * sizeof(float));
      const auto r = reference_weight_only(xv, n_tokens, q, nullptr);
      INFO(q.describe() << " tokens " << n_tokens);
      test::check_close(got_d.data(), r.ref_bf16.data(), n_y(r), r.tol_gemm.data(), 0.0, 1e-6, "default import");
      test::check_close(got_q.data(), r.ref_bf16.data(), n_y(r), r.tol_any.data(), 0.0, 1e-6, "cpu import");
      // Many tokens: both run the bf16 panel tiles on the same bf16 weights.
      if (n_tokens >= cpu::matmul_gemm_min_tokens && cpu::have_quantized_avx512_kernels() &&
          cpu::bf16_panels_preferred())
        CHECK(got_q == got_d);
    }
  // W8A8 has no bf16 form: the default refuses it, the CPU backend runs it.
  const quantized_linear w8 = make_weight(8, 8, 128, 0, maker::rtn_symmetric, activation_quant::int8_per_token, 9);
  CHECK_THROWS_AS(b.backend::import_quantized_linear(w8), std::runtime_error);
  CHECK(b.import_quantized_linear(w8).layout == tensor_layout::cpu_q8);
  // A group size no vector kernel takes: weight-only goes the bf16 way, W8A8 to the scalar path.
  const quantized_linear g16 = make_weight(4, 8, 64, 16, maker::hand_made, activation_quant::none, 10);
  CHECK_FALSE(is_quantized_layout(b.import_quantized_linear(g16).layout));
  const quantized_linear w8g32 = make_weight(8, 8, 64, 32, maker::hand_made, activation_quant::int8_per_token, 11);
  CHECK(b.import_quantized_linear(w8g32).layout == tensor_layout::cpu_q8);
  // A broken weight is refused by name.
  quantized_linear bad = g16;
  bad.group_size = 24;
  CHECK_THROWS_AS(b.import_quantized_linear(bad), std::invalid_argument);
}
