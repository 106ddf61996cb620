// swiglu_down (the dense MLP as one decode call) against a float64 reference, against matmul_silu_gate for its
// activations, and against itself across batch sizes, pool sizes and the two ways of running it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "kernels/cpu/swiglu_down.hpp"

using namespace actorllm;

namespace {

// One MLP's weights, bf16 row-major and packed.
struct mlp {
  int64_t n_in, n_ff, n_out;
  std::vector<uint16_t> gate_up, down;  // [2 n_ff, n_in] (gate's rows, then up's), [n_out, n_ff]
  std::shared_ptr<std::vector<uint16_t>> packed_gate_up, packed_down;

  mlp(int64_t in, int64_t ff, int64_t out, uint64_t seed, thread_pool& pool) : n_in(in), n_ff(ff), n_out(out) {
    auto bf16 = [](const std::vector<float>& f) {
      std::vector<uint16_t> b(f.size());
      for (size_t i = 0; i < f.size(); ++i)
        b[i] = f32_to_bf16(f[i]);
      return b;
    };
    gate_up = bf16(test::random_floats(static_cast<size_t>(2 * n_ff * n_in), seed, -0.3f, 0.3f));
    down = bf16(test::random_floats(static_cast<size_t>(n_out * n_ff), seed + 1, -0.3f, 0.3f));
    packed_gate_up = std::make_shared<std::vector<uint16_t>>(cpu::bf16_panels_bytes(2 * n_ff, n_in) / 2);
    packed_down = std::make_shared<std::vector<uint16_t>>(cpu::bf16_panels_bytes(n_out, n_ff) / 2);
    cpu::pack_bf16_panels(gate_up.data(), 2 * n_ff, n_in, packed_gate_up->data(), pool);
    cpu::pack_bf16_panels(down.data(), n_out, n_ff, packed_down->data(), pool);
  }

  cpu::swiglu_down_weights weights(bool owned) const {
    return {packed_gate_up->data(),           packed_down->data(),          n_in, n_ff, n_out,
            owned ? packed_gate_up : nullptr, owned ? packed_down : nullptr};
  }
};

struct result {
  std::vector<float> act, y;
};

result run(const mlp& m, const std::vector<float>& x, int64_t n_tokens, thread_pool& pool, bool owned = true) {
  result r{std::vector<float>(static_cast<size_t>(n_tokens * m.n_ff)),
           std::vector<float>(static_cast<size_t>(n_tokens * m.n_out))};
  std::vector<float> up(static_cast<size_t>(n_tokens * m.n_ff));
  cpu::swiglu_down(x.data(), n_tokens, m.weights(owned), up.data(), r.act.data(), r.y.data(), pool);
  return r;
}

double bf16_value(float v) { return static_cast<double>(bf16_to_f32(f32_to_bf16(v))); }

// y = act down^T in float64, act rounded to bf16 as down multiplies it, and each output's sum of |products| (what f32
// accumulation error scales with).
std::pair<std::vector<double>, std::vector<double>> down_reference(const mlp& m, const std::vector<float>& act,
                                                                   int64_t n_tokens) {
  std::vector<double> y(static_cast<size_t>(n_tokens * m.n_out)), magnitude(y.size());
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t o = 0; o < m.n_out; ++o) {
      double s = 0.0, a = 0.0;
      for (int64_t k = 0; k < m.n_ff; ++k) {
        const double p = bf16_value(act[static_cast<size_t>(t * m.n_ff + k)]) *
                         static_cast<double>(bf16_to_f32(m.down[static_cast<size_t>(o * m.n_ff + k)]));
        s += p;
        a += std::abs(p);
      }
      y[static_cast<size_t>(t * m.n_out + o)] = s;
      magnitude[static_cast<size_t>(t * m.n_out + o)] = a;
    }
  return {y, magnitude};
}

}  // namespace

TEST_CASE(
    "swiglu_down: act as matmul_silu_gate writes it, y within f32 rounding of float64, the same bits at 1 to 13 "
    "tokens, 1 to 3 threads, owned or not [asan]") {
  if (!cpu::have_bf16_dot_kernels()) {
    MESSAGE("skipped: this build or CPU has no AVX512-BF16 kernels");
    return;
  }
  thread_pool pack_pool(2);
  // Shapes: inputs not a multiple of 32 (padded panels), outputs not a multiple of 32 (a short last panel), and an
  // MLP wide enough for many grains in both halves.
  for (const auto& [n_in, n_ff, n_out] : {std::tuple{80, 192, 70}, std::tuple{256, 1536, 320}}) {
    const mlp m(n_in, n_ff, n_out, 11 + static_cast<uint64_t>(n_ff), pack_pool);
    constexpr int64_t max_tokens = 13;
    const std::vector<float> x = test::random_floats(static_cast<size_t>(max_tokens * n_in), 5, -1.0f, 1.0f);
    thread_pool ref_pool(1);
    const result all = run(m, x, max_tokens, ref_pool);

    // act: bit for bit what matmul_silu_gate writes
    std::vector<float> act(static_cast<size_t>(max_tokens * n_ff)), up(act.size());
    const uint16_t* up_w = m.packed_gate_up->data() + cpu::bf16_panels_bytes(n_ff, n_in) / 2;
    cpu::matmul_silu_gate(x.data(), max_tokens, n_in, m.packed_gate_up->data(), up_w, dtype::bf16, true, n_ff,
                          up.data(), act.data(), ref_pool);
    CHECK(std::memcmp(act.data(), all.act.data(), act.size() * sizeof(float)) == 0);

    // y: float64 of the bf16 act, within f32 accumulation error (relative to the products' magnitudes)
    const auto [ref, magnitude] = down_reference(m, all.act, max_tokens);
    double worst = 0.0;
    for (size_t i = 0; i < ref.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(all.y[i]) - ref[i]) / magnitude[i]);
    INFO("n_ff " << n_ff << ": worst error over the sum of |products| " << worst);
    CHECK(worst < 2e-6);

    // Every batch size, pool size and with or without owners (the one-call decode needs them): the same bits
    for (int threads : {1, 2, 3}) {
      thread_pool pool(threads);
      for (int64_t n : {1, 2, 3, 4, 5, 13})
        for (bool owned : {true, false}) {
          const result r = run(m, x, n, pool, owned);
          INFO("threads " << threads << ", tokens " << n << ", owned " << owned);
          CHECK(std::memcmp(r.y.data(), all.y.data(), r.y.size() * sizeof(float)) == 0);
          CHECK(std::memcmp(r.act.data(), all.act.data(), r.act.size() * sizeof(float)) == 0);
        }
    }
  }
}

TEST_CASE("swiglu_down: run as the two calls it replaces, the same act and y within f32 rounding [asan]") {
  if (!cpu::have_bf16_dot_kernels()) {
    MESSAGE("skipped: this build or CPU has no AVX512-BF16 kernels");
    return;
  }
  thread_pool pool(2);
  const mlp m(128, 640, 96, 3, pool);
  const std::vector<float> x = test::random_floats(static_cast<size_t>(2 * m.n_in), 9, -1.0f, 1.0f);
  const result fused = run(m, x, 2, pool);
  cpu::set_swiglu_down_fused(false);
  const result apart = run(m, x, 2, pool);
  cpu::set_swiglu_down_fused(true);
  CHECK(std::memcmp(fused.act.data(), apart.act.data(), fused.act.size() * sizeof(float)) == 0);
  bool differs = false;
  for (size_t i = 0; i < fused.y.size(); ++i) {
    CHECK(std::abs(fused.y[i] - apart.y[i]) <= 1e-4f * (1.0f + std::abs(apart.y[i])));
    differs = differs || fused.y[i] != apart.y[i];
  }
  const std::string how = differs ? "differ from" : "equal";
  MESSAGE("down's halves added " << how << " the whole sum in some bits");
}

TEST_CASE("swiglu_down: refuses widths whose halves are not whole steps") {
  CHECK_FALSE(cpu::swiglu_down_supported(96));
  CHECK_FALSE(cpu::swiglu_down_supported(0));
  CHECK(cpu::swiglu_down_supported(128) == cpu::have_bf16_dot_kernels());
}
