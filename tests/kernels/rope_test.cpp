// RoPE: inverse frequencies (default, linear, llama3) against a float64 transcription of transformers' rope
// init, and the rotation against a float64 reference up to 128k positions.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/rope.hpp"

using namespace actorllm;

namespace {

// transformers' _compute_default_rope_parameters and _compute_llama3_parameters, in double.
std::vector<double> ref_inv_freq(const rope_config& cfg) {
  int64_t half = cfg.head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[static_cast<size_t>(i)] = 1.0 / std::pow(cfg.theta, static_cast<double>(2 * i) / cfg.head_dim);
  const rope_scaling& s = cfg.scaling;
  if (s.type == rope_scaling::kind::linear) {
    for (double& f : inv)
      f /= s.factor;
  } else if (s.type == rope_scaling::kind::llama3) {
    double old_ctx = static_cast<double>(s.original_max_position_embeddings);
    double low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
    for (double& f : inv) {
      double wl = 2 * std::numbers::pi / f;
      double scaled = wl > low_wl ? f / s.factor : f;
      double smooth = (old_ctx / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      double smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
      bool medium = !(wl < high_wl) && !(wl > low_wl);
      f = medium ? smoothed : scaled;
    }
  }
  return inv;
}

void check_inv_freq(const rope_config& cfg, const std::string& what) {
  auto got = cpu::rope_inv_freq(cfg);
  auto ref = ref_inv_freq(cfg);
  REQUIRE(got.size() == ref.size());
  test::check_close(got, ref, 0.0, 2e-6, what);  // float32 arithmetic vs double: a few ulp
}

rope_config llama32_1b() {
  rope_config c;
  c.head_dim = 64;
  c.theta = 500000.0;
  c.scaling.type = rope_scaling::kind::llama3;
  c.scaling.factor = 32.0;
  c.scaling.low_freq_factor = 1.0;
  c.scaling.high_freq_factor = 4.0;
  c.scaling.original_max_position_embeddings = 8192;
  return c;
}

}  // namespace

TEST_CASE("rope_inv_freq default and linear scaling [asan]") {
  for (int64_t hd : {2, 6, 64, 128}) {
    rope_config c;
    c.head_dim = hd;
    c.theta = 10000.0;
    check_inv_freq(c, "default head_dim " + std::to_string(hd));
    c.theta = 500000.0;
    check_inv_freq(c, "default theta 5e5 head_dim " + std::to_string(hd));
    c.scaling.type = rope_scaling::kind::linear;
    c.scaling.factor = 4.0;
    check_inv_freq(c, "linear head_dim " + std::to_string(hd));
  }
  rope_config c;
  c.head_dim = 8;
  auto f = cpu::rope_inv_freq(c);
  CHECK(f[0] == 1.0f);
  CHECK(f[2] == doctest::Approx(0.01));  // 10000^(-4/8)
}

TEST_CASE("rope_inv_freq llama3 scaling keeps high, divides low, blends the band [asan]") {
  rope_config c = llama32_1b();
  check_inv_freq(c, "llama3 (Llama-3.2-1B)");
  c.head_dim = 128;
  c.scaling.factor = 8.0;  // Llama-3.1-8B
  check_inv_freq(c, "llama3 (Llama-3.1-8B)");

  rope_config plain = llama32_1b();
  plain.scaling = {};
  auto base = cpu::rope_inv_freq(plain);
  auto scaled = cpu::rope_inv_freq(llama32_1b());
  int n_high = 0, n_low = 0, n_mid = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    double wl = 2 * std::numbers::pi / base[i];
    if (wl < 8192.0 / 4.0) {
      CHECK(scaled[i] == base[i]);
      ++n_high;
    } else if (wl > 8192.0) {
      CHECK(scaled[i] == doctest::Approx(base[i] / 32.0).epsilon(1e-6));
      ++n_low;
    } else {
      CHECK(scaled[i] < base[i]);
      CHECK(scaled[i] > base[i] / 32.0f);
      ++n_mid;
    }
  }
  CHECK(n_high > 0);  // the test exercises all three bands
  CHECK(n_low > 0);
  CHECK(n_mid > 0);
}

TEST_CASE("apply_rope matches float64 rotation up to 128k positions [asan]") {
  for (int64_t head_dim : {2, 10, 64, 128}) {
    rope_config cfg = llama32_1b();
    cfg.head_dim = head_dim;
    auto inv = cpu::rope_inv_freq(cfg);
    std::vector<int32_t> positions = {0, 1, 7, 1000, 8191, 65537, 131071};
    const int64_t n_tokens = static_cast<int64_t>(positions.size()), n_head = 3, n_head_kv = 2;
    auto q = test::random_floats(static_cast<size_t>(n_tokens * n_head * head_dim), 900 + head_dim);
    auto k = test::random_floats(static_cast<size_t>(n_tokens * n_head_kv * head_dim), 950 + head_dim);

    auto reference = [&](const std::vector<float>& v, int64_t heads, std::vector<double>& ref,
                         std::vector<double>& tol) {
      ref.assign(v.size(), 0.0);
      tol.assign(v.size(), 0.0);
      int64_t half = head_dim / 2;
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          size_t base = static_cast<size_t>((t * heads + h) * head_dim);
          for (int64_t i = 0; i < half; ++i) {
            double angle = static_cast<double>(positions[static_cast<size_t>(t)]) * inv[static_cast<size_t>(i)];
            double a = v[base + static_cast<size_t>(i)], b = v[base + static_cast<size_t>(i + half)];
            ref[base + static_cast<size_t>(i)] = a * std::cos(angle) - b * std::sin(angle);
            ref[base + static_cast<size_t>(i + half)] = b * std::cos(angle) + a * std::sin(angle);
            // ~1e-6 relative to the rotated pair's magnitude (a rotation can cancel one component to ~0).
            double mag = std::fabs(a) + std::fabs(b);
            tol[base + static_cast<size_t>(i)] = tol[base + static_cast<size_t>(i + half)] = 1e-6 * mag;
          }
        }
      }
    };
    std::vector<double> ref_q, tol_q, ref_k, tol_k;
    reference(q, n_head, ref_q, tol_q);
    reference(k, n_head_kv, ref_k, tol_k);
    cpu::apply_rope(inv.data(), head_dim, positions.data(), n_tokens, q.data(), n_head, k.data(), n_head_kv);
    std::string what = "head_dim " + std::to_string(head_dim);
    test::check_close(q.data(), ref_q.data(), q.size(), tol_q.data(), 0.0, 0.0, "rope q " + what);
    test::check_close(k.data(), ref_k.data(), k.size(), tol_k.data(), 0.0, 0.0, "rope k " + what);
  }
}

TEST_CASE("apply_rope at position 0 is the identity and k may be null [asan]") {
  rope_config cfg;
  cfg.head_dim = 16;
  auto inv = cpu::rope_inv_freq(cfg);
  auto q = test::random_floats(2 * 16, 5);
  auto q0 = q;
  int32_t pos[1] = {0};
  cpu::apply_rope(inv.data(), 16, pos, 1, q.data(), 2, nullptr, 0);
  CHECK(q == q0);
}
