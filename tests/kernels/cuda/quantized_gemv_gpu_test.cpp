// cuda_backend on quantized Linear weights (tensor_layout::cuda_q4 / cuda_q8) on the GPU, against a float64
// reference of the dequantized weight times x rounded to bf16: matmul at 1 to 32 tokens (the tensor-core GEMV, one
// pass per 8 tokens) and at 33, 64 and 300 (dequantized chunks through cuBLAS), with and without a bias, 4 and 8
// bits, groups of 16 to per channel, GPTQ v1 zero points of 16, odd n_out; matmul_group and matmul_silu_gate over
// quantized weights; the same matmuls replayed from a captured CUDA graph; an x that is not 16-byte aligned; what
// import_quantized_linear makes (layout, device bytes) and refuses (W8A8), and the bf16 fallback for groups it does
// not take. Guards after every output catch writes past its end. Skipped ("skipped: no GPU") where there is none;
// the kernel's math runs on the CPU in quantized_gemv_math_test.cpp.
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/quantized_gemv_math.hpp"
#include "kernels/dtype.hpp"
#include "kernels/quantized_linear.hpp"

#include "gpu_test_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace actorllm;
using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::require_gpu;

constexpr float guard_value = 4242.0f;
constexpr int64_t guard_floats = 37;

quantized_linear random_weight(std::mt19937& gen, int bits, int64_t n_out, int64_t n_in, int64_t group_size) {
  quantized_linear w;
  w.bits = bits;
  w.n_out = n_out;
  w.n_in = n_in;
  w.group_size = group_size == 0 ? n_in : group_size;
  std::uniform_int_distribution<int> code(0, (1 << bits) - 1), zero(0, bits == 4 ? 16 : 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  for (int64_t i = 0; i < n_out * n_in; ++i)
    w.codes.push_back(static_cast<uint8_t>(code(gen)));
  for (int64_t i = 0; i < n_out * w.n_groups(); ++i) {
    w.scales.push_back(i % 9 == 4 ? -scale(gen) : scale(gen));
    w.zeros.push_back(static_cast<uint8_t>(bits == 4 && i % 4 == 1 ? 16 : zero(gen)));
  }
  w.validate();
  return w;
}

std::vector<float> random_floats(std::mt19937& gen, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v)
    f = d(gen);
  return v;
}

// The relative bound per unit of summed magnitude: the GEMV multiplies exact (code - zero) values and scales in f32
// (only x is rounded, which the reference does too), the prefill path multiplies the weight rounded to bf16 (2^-9).
constexpr double gemv_rel = 2e-4, bf16_weight_rel = 4e-3;
bool takes_gemv(int64_t n_tokens) {
  return n_tokens <= int64_t{cuda::qgemv::max_tokens} * cuda::qgemv::max_gemv_passes;
}
double rel_bound(int64_t n_tokens) { return takes_gemv(n_tokens) ? gemv_rel : bf16_weight_rel; }

// float64 y = bf16(x) w^T (+ bias) and per-output tolerances: rel (default: the bound of the path n_tokens takes)
// per unit of summed magnitude.
void reference(const quantized_linear& w, const std::vector<float>& x, int64_t n_tokens, const std::vector<float>* bias,
               std::vector<double>& ref, std::vector<double>& tol, double rel = 0) {
  if (rel == 0)
    rel = rel_bound(n_tokens);
  ref.assign(static_cast<size_t>(n_tokens * w.n_out), 0.0);
  tol.assign(ref.size(), 0.0);
  std::vector<double> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    xb[i] = bf16_to_f32(f32_to_bf16(x[i]));
  for (int64_t o = 0; o < w.n_out; ++o) {
    std::vector<double> row(static_cast<size_t>(w.n_in));
    for (int64_t i = 0; i < w.n_in; ++i)
      row[static_cast<size_t>(i)] = w.dequantized(o, i);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double acc = bias ? (*bias)[static_cast<size_t>(o)] : 0.0, mag = std::fabs(acc);
      for (int64_t i = 0; i < w.n_in; ++i) {
        const double p = xb[static_cast<size_t>(t * w.n_in + i)] * row[static_cast<size_t>(i)];
        acc += p;
        mag += std::fabs(p);
      }
      ref[static_cast<size_t>(t * w.n_out + o)] = acc;
      tol[static_cast<size_t>(t * w.n_out + o)] = 1e-6 + rel * mag;
    }
  }
}

// An f32 output [rows, cols] followed by guard floats.
struct guarded_out {
  guarded_out(cuda::cuda_backend& be, int64_t rows, int64_t cols) {
    whole = be.alloc(dtype::f32, {rows * cols + guard_floats});
    std::vector<float> init(static_cast<size_t>(whole.numel()), guard_value);
    std::fill(init.begin(), init.begin() + rows * cols, std::nanf(""));
    be.upload(whole, init.data(), whole.nbytes());
    view = whole;
    view.shape = tensor_shape{rows, cols};
  }
  // The view's values; the guards must be intact.
  std::vector<float> read(cuda::cuda_backend& be) const {
    std::vector<float> all(static_cast<size_t>(whole.numel()));
    be.download(whole, all.data(), whole.nbytes());
    const auto n = static_cast<size_t>(view.numel());
    CHECK_MESSAGE(
        std::all_of(all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), [](float f) { return f == guard_value; }),
        "a write past the output's end");
    all.resize(n);
    return all;
  }
  tensor whole, view;
};

tensor upload_f32(cuda::cuda_backend& be, const std::vector<float>& v, tensor_shape shape) {
  tensor t = be.alloc(dtype::f32, shape);
  be.upload(t, v.data(), t.nbytes());
  return t;
}

void check_against(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& tol,
                   const std::string& what) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0, worst = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= tol[i])) {
      if (bad == 0 || err - tol[i] > worst_excess) {
        worst = i;
        worst_excess = err - tol[i];
      }
      ++bad;
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " outputs off, worst at " << worst << ": got "
                               << (bad ? got[worst] : 0.0f) << ", want " << (bad ? ref[worst] : 0.0) << " +- "
                               << (bad ? tol[worst] : 0.0));
}

}  // namespace

TEST_CASE("cuda quantized matmul: int4 and int8 weights at 1 to 300 tokens equal the float64 reference" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda::cuda_backend be{0};
  std::mt19937 gen{77};
  struct shape {
    int bits;
    int64_t n_out, n_in, group;  // group 0: per channel
  };
  const shape shapes[] = {{4, 37, 256, 32},  {4, 301, 1024, 128}, {4, 16, 48, 16}, {4, 129, 512, 0},
                          {8, 45, 640, 128}, {8, 129, 512, 0},    {8, 33, 96, 16}, {8, 300, 2048, 64},
                          {4, 1, 64, 64},    {4, 515, 4096, 128}};
  for (const shape& s : shapes) {
    const quantized_linear w = random_weight(gen, s.bits, s.n_out, s.n_in, s.group);
    const tensor tw = be.import_quantized_linear(w);
    REQUIRE(tw.layout == (s.bits == 4 ? tensor_layout::cuda_q4 : tensor_layout::cuda_q8));
    for (int64_t n_tokens : {1, 3, 8, 20, 32, 33, 64, 300}) {
      if (s.n_in > 2048 && (n_tokens == 3 || n_tokens == 32 || n_tokens == 33 || n_tokens == 300))
        continue;  // the widest shape at fewer sizes: the float64 reference is host time
      for (bool with_bias : {false, true}) {
        const std::string what =
            w.describe() + " x " + std::to_string(n_tokens) + " tokens" + (with_bias ? " + bias" : "");
        CAPTURE(what);
        const std::vector<float> x = random_floats(gen, n_tokens * s.n_in, -2.0f, 2.0f);
        const std::vector<float> bias = random_floats(gen, s.n_out);
        const tensor tx = upload_f32(be, x, {n_tokens, s.n_in});
        const tensor tb = with_bias ? upload_f32(be, bias, {s.n_out}) : tensor{};
        guarded_out y{be, n_tokens, s.n_out};
        be.matmul(tx, tw, tb, y.view);
        std::vector<double> ref, tol;
        reference(w, x, n_tokens, with_bias ? &bias : nullptr, ref, tol);
        check_against(y.read(be), ref, tol, what);
      }
    }
  }
}

TEST_CASE("cuda quantized matmul_group and matmul_silu_gate over quantized weights" * doctest::skip(!gpu_available())) {
  require_gpu();
  cuda::cuda_backend be{0};
  std::mt19937 gen{78};
  const int64_t n_in = 384;
  for (int64_t n_tokens : {1, 5, 8, 20, 100}) {
    CAPTURE(n_tokens);
    const std::vector<float> x = random_floats(gen, n_tokens * n_in);
    const tensor tx = upload_f32(be, x, {n_tokens, n_in});
    // q/k/v-like: int4 g128 with a bias, int8 g64 with a bias, int4 per channel.
    const quantized_linear ws[] = {random_weight(gen, 4, 70, n_in, 128), random_weight(gen, 8, 33, n_in, 64),
                                   random_weight(gen, 4, 19, n_in, 0)};
    std::vector<std::vector<float>> biases;
    std::vector<guarded_out> ys;
    std::vector<linear_out> outs;
    for (int i = 0; i < 3; ++i) {
      biases.push_back(random_floats(gen, ws[i].n_out));
      ys.emplace_back(be, n_tokens, ws[i].n_out);
    }
    for (int i = 0; i < 3; ++i)
      outs.push_back({be.import_quantized_linear(ws[i]),
                      i < 2 ? upload_f32(be, biases[static_cast<size_t>(i)], {ws[i].n_out}) : tensor{},
                      ys[static_cast<size_t>(i)].view});
    be.matmul_group(tx, outs);
    for (size_t i = 0; i < 3; ++i) {
      std::vector<double> ref, tol;
      reference(ws[i], x, n_tokens, i < 2 ? &biases[i] : nullptr, ref, tol);
      check_against(ys[i].read(be), ref, tol, "group output " + std::to_string(i));
    }

    const int64_t n_ff = 150;
    const quantized_linear wg = random_weight(gen, 4, n_ff, n_in, 64), wu = random_weight(gen, 4, n_ff, n_in, 64);
    guarded_out up{be, n_tokens, n_ff}, out{be, n_tokens, n_ff};
    be.matmul_silu_gate(tx, be.import_quantized_linear(wg), be.import_quantized_linear(wu), up.view, out.view);
    std::vector<double> g_ref, g_tol, u_ref, u_tol;
    reference(wg, x, n_tokens, nullptr, g_ref, g_tol);
    reference(wu, x, n_tokens, nullptr, u_ref, u_tol);
    const std::vector<float> got = out.read(be);
    up.read(be);  // scratch, but within its bounds
    for (size_t i = 0; i < got.size(); ++i) {
      const double g = g_ref[i], u = u_ref[i];
      const double want = g / (1 + std::exp(-g)) * u;
      // silu's slope is at most 1.1 and |silu(g)| <= |g| + 0.3: the inputs' tolerances carried through the product.
      const double tol =
          1.1 * g_tol[i] * (std::fabs(u) + u_tol[i]) + (std::fabs(g) + 0.3) * u_tol[i] + 1e-6 * (1 + std::fabs(want));
      CHECK(std::fabs(got[i] - want) <= tol);
    }
  }
}

TEST_CASE("cuda quantized matmul inside a captured graph equals the eager run after the input changes" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda::cuda_backend be{0};
  std::mt19937 gen{79};
  const int64_t n_in = 512, n_out = 96;
  const quantized_linear w4 = random_weight(gen, 4, n_out, n_in, 128), w8 = random_weight(gen, 8, n_out, n_in, 0);
  const tensor t4 = be.import_quantized_linear(w4), t8 = be.import_quantized_linear(w8);
  const tensor bias = upload_f32(be, random_floats(gen, n_out), {n_out});
  for (int64_t n_tokens : {3, 20, 64}) {  // the GEMV (one pass, three), the dequantized chunks through cuBLAS
    CAPTURE(n_tokens);
    const tensor x = be.alloc(dtype::f32, {n_tokens, n_in});
    const tensor y4 = be.alloc(dtype::f32, {n_tokens, n_out}), y8 = be.alloc(dtype::f32, {n_tokens, n_out});
    auto step = [&] {
      be.matmul(x, t4, bias, y4);
      be.matmul(x, t8, tensor{}, y8);
    };
    be.use_graph_scratch(true);
    be.upload(x, random_floats(gen, n_tokens * n_in).data(), x.nbytes());
    step();  // the warm-up sizes the graph scratch
    auto graph = be.capture_graph(step);
    be.use_graph_scratch(false);
    const std::vector<float> x2 = random_floats(gen, n_tokens * n_in);
    be.upload(x, x2.data(), x.nbytes());
    graph->replay();
    std::vector<float> g4(static_cast<size_t>(y4.numel())), g8(g4.size());
    be.download(y4, g4.data(), y4.nbytes());
    be.download(y8, g8.data(), y8.nbytes());
    step();  // eager, same input
    std::vector<float> e4(g4.size()), e8(g4.size());
    be.download(y4, e4.data(), y4.nbytes());
    be.download(y8, e8.data(), y8.nbytes());
    if (takes_gemv(n_tokens)) {  // the GEMV's order is fixed: bit for bit
      CHECK(g4 == e4);
      CHECK(g8 == e8);
    }
    std::vector<float> bias_host(static_cast<size_t>(n_out));
    be.download(bias, bias_host.data(), bias.nbytes());
    std::vector<double> ref, tol;
    reference(w4, x2, n_tokens, &bias_host, ref, tol);
    check_against(g4, ref, tol, "int4 from the graph");
    reference(w8, x2, n_tokens, nullptr, ref, tol);
    check_against(g8, ref, tol, "int8 from the graph");
  }
}

TEST_CASE("cuda quantized matmul: an x that is not 16-byte aligned, zero tokens" * doctest::skip(!gpu_available())) {
  require_gpu();
  cuda::cuda_backend be{0};
  std::mt19937 gen{80};
  const int64_t n_in = 128, n_out = 40, n_tokens = 2;
  const quantized_linear w = random_weight(gen, 4, n_out, n_in, 32);
  const tensor tw = be.import_quantized_linear(w);
  const std::vector<float> x = random_floats(gen, n_tokens * n_in);
  tensor whole = be.alloc(dtype::f32, {n_tokens * n_in + 1});
  tensor tx = whole;
  tx.offset += sizeof(float);  // 4 bytes in: the kernel's float4 loads need a copy first
  tx.shape = tensor_shape{n_tokens, n_in};
  be.upload(tx, x.data(), tx.nbytes());
  guarded_out y{be, n_tokens, n_out};
  be.matmul(tx, tw, tensor{}, y.view);
  std::vector<double> ref, tol;
  reference(w, x, n_tokens, nullptr, ref, tol);
  check_against(y.read(be), ref, tol, "unaligned x");

  guarded_out empty{be, 0, n_out};
  be.matmul(be.alloc(dtype::f32, {0, n_in}), tw, tensor{}, empty.view);
  CHECK(empty.read(be).empty());
}

TEST_CASE("cuda import_quantized_linear keeps codes in device memory, refuses W8A8 by name and falls back to bf16" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda::cuda_backend be{0};
  std::mt19937 gen{81};
  const quantized_linear w = random_weight(gen, 4, 4096, 4096, 128);
  const size_t before = be.memory_info().in_use;
  const tensor t = be.import_quantized_linear(w);
  const size_t grown = be.memory_info().in_use - before;
  CHECK(t.type == dtype::bf16);  // logical
  CHECK(t.shape == tensor_shape{4096, 4096});
  CHECK(t.layout == tensor_layout::cuda_q4);
  CHECK(t.where() == be.where());
  // int4 codes, f32 scales and u8 zero points: about 0.53 bytes per weight, not bf16's 2 (allocations round to 2 MiB).
  CHECK(grown >= w.packed_bytes());
  CHECK(grown <= w.packed_bytes() + (size_t{4} << 20));

  quantized_linear w8a8 = random_weight(gen, 8, 16, 64, 0);
  std::fill(w8a8.zeros.begin(), w8a8.zeros.end(), uint8_t{128});
  w8a8.activations = activation_quant::int8_per_token;
  try {
    be.import_quantized_linear(w8a8);
    FAIL("W8A8 was accepted");
  } catch (const std::runtime_error& e) {
    CHECK(std::string{e.what()}.find("W8A8") != std::string::npos);
  }

  // Groups of 8 inputs: no GEMV format, dequantized to bf16 at import; matmul still equals the reference (the bf16
  // path's bound).
  const quantized_linear small = random_weight(gen, 4, 21, 72, 8);
  const tensor ts = be.import_quantized_linear(small);
  CHECK(ts.layout == tensor_layout::row_major);
  const std::vector<float> x = random_floats(gen, 3 * 72);
  guarded_out y{be, 3, 21};
  be.matmul(upload_f32(be, x, {3, 72}), ts, tensor{}, y.view);
  std::vector<double> ref, tol;
  reference(small, x, 3, nullptr, ref, tol, bf16_weight_rel);
  check_against(y.read(be), ref, tol, "bf16 fallback");
}
