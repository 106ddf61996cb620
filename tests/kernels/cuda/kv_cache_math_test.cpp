// The fp8 e4m3 arithmetic of the GPU KV cache (kv_cache_math.hpp) on the CPU, no GPU needed: every code decodes as
// kernels/dtype's conversion and as the format's definition written out here; encoding is checked against a
// brute-force nearest code (ties to the even code) over every code, every midpoint and its neighbours, random floats
// of every magnitude, saturation at +-448 and NaN; and the scale folding the attention kernels do (k_scale into the
// score scale, v_scale on each loaded value) against float64 attention over the dequantized values.
#include "kernels/cuda/kv_cache_math.hpp"
#include "kernels/dtype.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

using namespace actorllm;
using namespace actorllm::cuda;

// The e4m3fn value of a code by its definition: (-1)^s x 2^(e - 7) x (1 + m / 8), subnormals 2^-6 x m / 8, and
// S.1111.111 NaN.
double e4m3_by_definition(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 0xf, m = c & 7;
  if (e == 15 && m == 7)
    return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s != 0 ? -mag : mag;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The code nearest x by search over every finite code (ties: the even code), saturated to +-448; NaN: 0x7f.
uint8_t nearest_code(float x) {
  if (std::isnan(x))
    return 0x7f;
  const double v = std::fmax(std::fmin(static_cast<double>(x), 448.0), -448.0);
  int best = -1;
  double best_err = INFINITY;
  for (int c = 0; c < 256; ++c) {
    const double cv = e4m3_by_definition(static_cast<uint8_t>(c));
    if (std::isnan(cv) || (std::signbit(cv) != std::signbit(v) && cv != 0.0))
      continue;
    if ((c & 0x80) != (std::signbit(x) ? 0x80 : 0))  // zero keeps x's sign
      continue;
    const double err = std::fabs(cv - v);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

}  // namespace

TEST_CASE("fp8 e4m3 decode: every code as defined and as kernels/dtype decodes it") {
  for (int c = 0; c < 256; ++c) {
    CAPTURE(c);
    const auto code = static_cast<uint8_t>(c);
    const float got = kvq::fp8_e4m3_decode(code);
    const double want = e4m3_by_definition(code);
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
      CHECK(std::isnan(fp8_e4m3_to_f32(code)));
      continue;
    }
    CHECK(static_cast<double>(got) == want);
    CHECK(std::signbit(got) == ((c & 0x80) != 0));
    CHECK(bits_of(got) == bits_of(fp8_e4m3_to_f32(code)));
  }
  CHECK(kvq::fp8_e4m3_decode(0x7e) == kvq::fp8_e4m3_max);
  CHECK(kvq::fp8_e4m3_decode(0x01) == std::ldexp(1.0f, -9));
}

TEST_CASE("fp8 e4m3 encode: nearest code, ties to even, saturation and NaN") {
  // Every finite code round-trips (both zeros keep their sign).
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f)
      continue;
    CAPTURE(c);
    CHECK(kvq::fp8_e4m3_encode(kvq::fp8_e4m3_decode(static_cast<uint8_t>(c))) == c);
  }
  // Midpoints between neighbouring codes go to the even one; a float step either side goes to the nearer one.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = kvq::fp8_e4m3_decode(static_cast<uint8_t>(c)),
                hi = kvq::fp8_e4m3_decode(static_cast<uint8_t>(c + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);  // exact in f32
    CAPTURE(c);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)}) {
      CHECK(kvq::fp8_e4m3_encode(x) == nearest_code(x));
      CHECK(kvq::fp8_e4m3_encode(-x) == nearest_code(-x));
      CHECK(kvq::fp8_e4m3_encode(x) == f32_to_fp8_e4m3(x));
    }
    CHECK(kvq::fp8_e4m3_encode(mid) == ((c & 1) == 0 ? c : c + 1));
  }
  // Saturation: 448 and everything beyond (infinities too) to +-448; NaN to 0x7f.
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(), INFINITY}) {
    CAPTURE(x);
    CHECK(kvq::fp8_e4m3_encode(x) == 0x7e);
    CHECK(kvq::fp8_e4m3_encode(-x) == 0xfe);
  }
  CHECK(kvq::fp8_e4m3_encode(std::nanf("")) == 0x7f);
  CHECK(kvq::fp8_e4m3_encode(-std::nanf("")) == 0x7f);
  // Below half the smallest subnormal: zero; exactly half: the even code 0; just above: the smallest subnormal.
  CHECK(kvq::fp8_e4m3_encode(std::ldexp(1.0f, -10)) == 0x00);
  CHECK(kvq::fp8_e4m3_encode(std::nextafter(std::ldexp(1.0f, -10), 1.0f)) == 0x01);
  CHECK(kvq::fp8_e4m3_encode(-std::ldexp(1.0f, -11)) == 0x80);
  CHECK(kvq::fp8_e4m3_encode(std::numeric_limits<float>::denorm_min()) == 0x00);
  // Random floats of every magnitude against the search and kernels/dtype's encoder.
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-14, 10);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mant(gen), exp(gen));
    CAPTURE(x);
    const uint8_t got = kvq::fp8_e4m3_encode(x);
    REQUIRE(got == nearest_code(x));
    REQUIRE(got == f32_to_fp8_e4m3(x));
  }
}

TEST_CASE("fp8 KV scales: quantize divides by the scale, and the kernels' folding matches float64 attention") {
  // quantize(x, s) is the code of x / s; dequantize(code, s) = value(code) * s.
  for (float s : {1.0f, 0.02f, 3.5f}) {
    for (float x : {0.0f, 0.3f, -1.7f, 5.0f, 900.0f}) {
      CAPTURE(s);
      CAPTURE(x);
      CHECK(kvq::fp8_quantize(x, s) == kvq::fp8_e4m3_encode(x / s));
      CHECK(kvq::fp8_dequantize(kvq::fp8_quantize(x, s), s) == kvq::fp8_e4m3_decode(kvq::fp8_e4m3_encode(x / s)) * s);
    }
  }
  // One query row over n keys as paged_attention.cu computes it for an fp8 cache: scores q . code * (scale * k_scale),
  // an online softmax, values code * v_scale; against float64 softmax attention over the dequantized k and v.
  const int hd = 16, n = 70;
  const float scale = 0.25f, k_scale = 0.005f, v_scale = 0.01f;
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> q(hd), k(static_cast<size_t>(n * hd)), v(k.size());
  for (float& x : q)
    x = dist(gen);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = dist(gen) * 2;  // codes up to 400 of 448 under k_scale
    v[i] = dist(gen) * 5;  // beyond 448 * v_scale = 4.48 for some: they saturate, as the reference sees
  }
  std::vector<uint8_t> kc(k.size()), vc(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    kc[i] = kvq::fp8_quantize(k[i], k_scale);
    vc[i] = kvq::fp8_quantize(v[i], v_scale);
  }
  // The kernel's way (f32).
  float m = -INFINITY, sum = 0.0f;
  std::vector<float> acc(hd, 0.0f);
  for (int j = 0; j < n; ++j) {
    float dot = 0.0f;
    for (int d = 0; d < hd; ++d)
      dot = std::fma(q[static_cast<size_t>(d)], kvq::fp8_e4m3_decode(kc[static_cast<size_t>(j * hd + d)]), dot);
    const float s = dot * (scale * k_scale);
    const float new_m = std::fmax(m, s);
    const float corr = m == -INFINITY ? 1.0f : std::exp(m - new_m);
    const float w = std::exp(s - new_m);
    sum = sum * corr + w;
    for (int d = 0; d < hd; ++d)
      acc[static_cast<size_t>(d)] = acc[static_cast<size_t>(d)] * corr +
                                    w * (kvq::fp8_e4m3_decode(vc[static_cast<size_t>(j * hd + d)]) * v_scale);
    m = new_m;
  }
  // float64 over the dequantized values.
  std::vector<double> scores(static_cast<size_t>(n));
  double mx = -INFINITY;
  for (int j = 0; j < n; ++j) {
    double dot = 0;
    for (int d = 0; d < hd; ++d)
      dot += static_cast<double>(q[static_cast<size_t>(d)]) *
             (static_cast<double>(kvq::fp8_e4m3_decode(kc[static_cast<size_t>(j * hd + d)])) * k_scale);
    scores[static_cast<size_t>(j)] = dot * scale;
    mx = std::fmax(mx, dot * scale);
  }
  double total = 0;
  for (double& s : scores)
    total += (s = std::exp(s - mx));
  for (int d = 0; d < hd; ++d) {
    double want = 0;
    for (int j = 0; j < n; ++j)
      want += scores[static_cast<size_t>(j)] *
              (static_cast<double>(kvq::fp8_e4m3_decode(vc[static_cast<size_t>(j * hd + d)])) * v_scale);
    want /= total;
    CAPTURE(d);
    CHECK(std::fabs(acc[static_cast<size_t>(d)] / sum - want) <= 2e-6 + 1e-4 * std::fabs(want));
  }
}
