// dtype conversions: f16/bf16 <-> f32 against independent float64 references (exhaustive where the domain is
// 16-bit), round trips, subnormals, inf/NaN, round-to-nearest-even ties; the bulk converters against the scalar
// ones.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <sstream>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/dtype.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

using namespace actorllm;

namespace {

// The value of an IEEE binary16 bit pattern, from the format's definition.
double f16_value(uint16_t h) {
  int sign = (h & 0x8000) ? -1 : 1;
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  if (exp == 0x1f)
    return mant != 0 ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (exp == 0)
    return sign * std::ldexp(static_cast<double>(mant), -24);
  return sign * std::ldexp(static_cast<double>(1024 + mant), exp - 25);
}

// The value of a bf16 bit pattern, from the format's definition (8-bit exponent, 7-bit mantissa).
double bf16_value(uint16_t h) {
  int sign = (h & 0x8000) ? -1 : 1;
  int exp = (h >> 7) & 0xff;
  int mant = h & 0x7f;
  if (exp == 0xff)
    return mant != 0 ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (exp == 0)
    return sign * std::ldexp(static_cast<double>(mant), -133);
  return sign * std::ldexp(static_cast<double>(128 + mant), exp - 134);
}

// Round a finite double to the nearest value with `mant_bits` explicit mantissa bits, minimum normal exponent
// `emin` (subnormals below), ties to even; returns inf beyond `max_finite` rounding. Independent of the code under
// test: it works on exact double arithmetic.
double round_to_format(double a, int mant_bits, int emin, double max_finite) {
  if (a == 0)
    return a;
  double mag = std::fabs(a);
  int e = std::ilogb(mag);
  if (e < emin)
    e = emin;
  double ulp = std::ldexp(1.0, e - mant_bits);
  double q = std::nearbyint(mag / ulp);  // exact division (power of two); default rounding mode: ties to even
  double r = q * ulp;
  if (r > max_finite)
    r = std::numeric_limits<double>::infinity();
  return std::copysign(r, a);
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

// Float bit patterns spread over the whole 32-bit space plus the interesting neighbourhoods.
std::vector<uint32_t> probe_patterns() {
  std::vector<uint32_t> v;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099)
    v.push_back(static_cast<uint32_t>(u));
  for (uint32_t base : {0x00000000u, 0x00800000u, 0x33000000u, 0x387fc000u, 0x38800000u, 0x3f800000u, 0x477fe000u,
                        0x477ff000u, 0x47800000u, 0x7f7f0000u, 0x7f7fffffu, 0x7f800000u}) {
    for (uint32_t d = 0; d < 64; ++d) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        v.push_back((base + d) | sign);
        v.push_back((base - d) | sign);
        v.push_back((base + (d << 12)) | sign);
      }
    }
  }
  return v;
}

}  // namespace

TEST_CASE("dtype names, sizes and parsing") {
  CHECK(dtype_size(dtype::f32) == 4);
  CHECK(dtype_size(dtype::f16) == 2);
  CHECK(dtype_size(dtype::bf16) == 2);
  CHECK(dtype_name(dtype::bf16) == "bf16");
  CHECK(parse_dtype("BF16") == dtype::bf16);
  CHECK(parse_dtype("float16") == dtype::f16);
  CHECK(parse_dtype("half") == dtype::f16);
  CHECK(parse_dtype("F32") == dtype::f32);
  CHECK(parse_dtype("float") == dtype::f32);
  CHECK_FALSE(parse_dtype("int8").has_value());
  CHECK_FALSE(parse_dtype("").has_value());
}

TEST_CASE("f16_to_f32 is exact for every f16 value [asan]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    double ref = f16_value(static_cast<uint16_t>(h));
    float got = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(got));
      continue;
    }
    REQUIRE(static_cast<double>(got) == ref);
    REQUIRE(std::signbit(got) == ((h & 0x8000) != 0));
#if defined(__F16C__)
    REQUIRE(bits(got) == bits(_cvtsh_ss(static_cast<unsigned short>(h))));
#endif
  }
}

TEST_CASE("f16 round trip is the identity on every non-NaN value [asan]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    uint16_t back = f32_to_f16(f);
    if (std::isnan(f))
      REQUIRE(std::isnan(f16_to_f32(back)));
    else
      REQUIRE(back == h);
  }
}

TEST_CASE("f32_to_f16 rounds to nearest even, with subnormals, overflow and NaN [asan]") {
  const double f16_max = 65504.0;
  for (uint32_t u : probe_patterns()) {
    float f = from_bits(u);
    uint16_t h = f32_to_f16(f);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(f16_to_f32(h)));
      continue;
    }
    double want = std::isinf(f) ? static_cast<double>(f) : round_to_format(f, 10, -14, f16_max);
    INFO("f32 bits 0x" << std::hex << u);
    REQUIRE(f16_value(h) == want);
    REQUIRE(((h & 0x8000) != 0) == std::signbit(f));
#if defined(__F16C__)
    REQUIRE(h == _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#endif
  }
  // Hand-picked ties and edges.
  CHECK(f32_to_f16(65504.0f) == 0x7bff);
  CHECK(f32_to_f16(65519.99f) == 0x7bff);
  CHECK(f32_to_f16(65520.0f) == 0x7c00);                      // halfway to 65536: ties to even = inf
  CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);         // smallest subnormal
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);         // halfway to it: ties to even = 0
  CHECK(f32_to_f16(std::ldexp(1.5f, -24)) == 0x0002);         // 1.5 ulp: ties to even = 2 ulp
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie between 1 and 1+2^-10: even = 1
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  CHECK(f32_to_f16(-std::numeric_limits<float>::infinity()) == 0xfc00);
}

TEST_CASE("bf16_to_f32 is exact for every bf16 value [asan]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    double ref = bf16_value(static_cast<uint16_t>(h));
    float got = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(got));
      continue;
    }
    REQUIRE(static_cast<double>(got) == ref);
    REQUIRE(f32_to_bf16(got) == h);  // round trip
  }
}

TEST_CASE("f32_to_bf16 rounds to nearest even, keeps NaN a NaN [asan]") {
  const double bf16_max = bf16_value(0x7f7f);
  for (uint32_t u : probe_patterns()) {
    float f = from_bits(u);
    uint16_t h = f32_to_bf16(f);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(bf16_to_f32(h)));  // also for NaNs whose payload sits in the dropped low bits
      continue;
    }
    double want = std::isinf(f) ? static_cast<double>(f) : round_to_format(f, 7, -126, bf16_max);
    INFO("f32 bits 0x" << std::hex << u);
    REQUIRE(bf16_value(h) == want);
  }
  CHECK(f32_to_bf16(from_bits(0x3f808000u)) == 0x3f80);  // tie, even stays
  CHECK(f32_to_bf16(from_bits(0x3f818000u)) == 0x3f82);  // tie, odd rounds up
  CHECK(f32_to_bf16(from_bits(0x3f808001u)) == 0x3f81);  // above the tie
  CHECK(f32_to_bf16(from_bits(0x7f7fffffu)) == 0x7f80);  // FLT_MAX rounds to inf
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(from_bits(0x7f800001u)))));
  CHECK(f32_to_bf16(from_bits(0x00010000u)) == 0x0001);  // f32 subnormal stays a bf16 subnormal
}

TEST_CASE("convert_to_f32 and convert_from_f32 agree with the scalar conversions [asan]") {
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{16}, size_t{33}, size_t{100}}) {
      auto values = test::random_floats(n, 1000 + n, -70000.0f, 70000.0f);
      if (n > 3) {
        values[0] = std::numeric_limits<float>::infinity();
        values[1] = std::ldexp(1.0f, -20);  // f16 subnormal
        values[2] = std::numeric_limits<float>::quiet_NaN();
      }
      std::vector<uint8_t> typed(n * dtype_size(t) + 1, 0xab);
      cpu::convert_from_f32(values.data(), static_cast<int64_t>(n), t, typed.data());
      CHECK(typed.back() == 0xab);  // wrote exactly n elements
      for (size_t i = 0; i < n; ++i) {
        std::vector<uint8_t> one(dtype_size(t));
        store_from_f32(one.data(), t, 0, values[i]);
        REQUIRE(std::memcmp(one.data(), typed.data() + i * dtype_size(t), dtype_size(t)) == 0);
      }
      std::vector<float> back(n + 1, 12345.0f);
      cpu::convert_to_f32(typed.data(), t, static_cast<int64_t>(n), back.data());
      CHECK(back.back() == 12345.0f);
      for (size_t i = 0; i < n; ++i) {
        float want = load_as_f32(typed.data(), t, i);
        if (std::isnan(want))
          REQUIRE(std::isnan(back[i]));
        else
          REQUIRE(bits(back[i]) == bits(want));
      }
    }
  }
}

namespace {

// FP8 e4m3 from the format's definition, in double (the project's first, libm-based conversions): the references
// of the table and the bit-level encoder.
double e4m3_value(uint8_t v) {
  const double sign = (v & 0x80u) != 0 ? -1.0 : 1.0;
  const int exp = (v >> 3) & 0xf, mant = v & 0x7;
  if (exp == 0xf && mant == 0x7)
    return std::numeric_limits<double>::quiet_NaN();
  if (exp == 0)
    return sign * std::ldexp(static_cast<double>(mant), -9);
  return sign * std::ldexp(static_cast<double>(8 + mant), exp - 10);
}

uint8_t e4m3_nearest(float f) {
  if (std::isnan(f))
    return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 448.0)
    return static_cast<uint8_t>(sign | 0x7e);
  if (a < std::ldexp(1.0, -6)) {
    const auto m = static_cast<int>(std::nearbyint(a * 512.0));
    return static_cast<uint8_t>(sign | (m >= 8 ? 0x08 : m));
  }
  int e = std::ilogb(a);
  auto m = static_cast<int>(std::nearbyint(std::ldexp(a, -e) * 8.0)) - 8;
  if (m == 8) {
    m = 0;
    ++e;
  }
  if (e > 8 || (e == 8 && m == 7))
    return static_cast<uint8_t>(sign | 0x7e);
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | m);
}

}  // namespace

TEST_CASE("fp8 e4m3 -> f32: every code is its value from the format's definition") {
  for (int v = 0; v < 256; ++v) {
    CAPTURE(v);
    const double want = e4m3_value(static_cast<uint8_t>(v));
    const float got = fp8_e4m3_to_f32(static_cast<uint8_t>(v));
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
      continue;
    }
    CHECK(static_cast<double>(got) == want);
    CHECK(std::signbit(got) == ((v & 0x80) != 0));  // -0 too
  }
}

TEST_CASE(
    "f32 -> fp8 e4m3: the nearest code, ties to even, saturated, on every code's neighbourhood and a sweep of "
    "all floats") {
  auto check = [](float f) {
    const uint8_t want = e4m3_nearest(f), got = f32_to_fp8_e4m3(f);
    if (want != got) {
      std::ostringstream what;
      what << "f = " << std::hexfloat << f << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(f) << "): got 0x"
           << int{got} << ", want 0x" << int{want};
      FAIL_CHECK(what.str());
    }
  };
  // Each code's value, the midpoints to its neighbours (the ties) and one float step either side of all of them.
  for (int v = 0; v < 0x7f; ++v) {
    const double here = e4m3_value(static_cast<uint8_t>(v));
    const double next = v + 1 < 0x7f ? e4m3_value(static_cast<uint8_t>(v + 1)) : 480.0;  // 480: past the largest
    for (double x : {here, (here + next) / 2}) {
      const auto f = static_cast<float>(x);
      for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, 1e9f)})
        for (float s : {g, -g})
          check(s);
    }
  }
  // Every 997th bit pattern of all 2^32: float subnormals, normals, infinities and NaNs of both signs.
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 997)
    check(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  CHECK(f32_to_fp8_e4m3(std::numeric_limits<float>::infinity()) == 0x7e);
  CHECK(f32_to_fp8_e4m3(-std::numeric_limits<float>::infinity()) == 0xfe);
  CHECK(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  CHECK(f32_to_fp8_e4m3(-0.0f) == 0x80);
  CHECK(f32_to_fp8_e4m3(0.5f * 0x1p-9f) == 0x00);  // a tie below the smallest subnormal: to even (0)
  CHECK(f32_to_fp8_e4m3(1.5f * 0x1p-9f) == 0x02);  // a tie between subnormals 1 and 2: to even (2)
  CHECK(f32_to_fp8_e4m3(1.0625f) == 0x38);         // a tie between 1 and 1.125: to even (1)
  CHECK(f32_to_fp8_e4m3(464.0f) == 0x7e);          // between 448 and 480: saturated to 448
}

// fp8_e4m3_round_trip_to_bf16 is the element-wise composition, bit for bit, on every code's neighbourhood, a sweep of
// float bit patterns (specials of both signs included) and scales of several sizes; lengths that leave a tail.
TEST_CASE("fp8 e4m3 round trip to bf16: the vector loop gives the scalar composition's bits [asan]") {
  std::vector<float> w;
  for (int v = 0; v < 0x7f; ++v) {
    const auto f = fp8_e4m3_to_f32(static_cast<uint8_t>(v));
    const float next = v + 1 < 0x7f ? fp8_e4m3_to_f32(static_cast<uint8_t>(v + 1)) : 480.0f;
    for (float x : {f, (f + next) / 2})
      for (float g : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e9f)})
        for (float s : {g, -g})
          w.push_back(s);
  }
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 104729)
    w.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  for (float f : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f,
                  std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::max()})
    w.push_back(f);
  for (float scale : {1.0f, 0.0123f, 3.7e-3f, 448.0f / 3.0f, 1e-30f, 2.5e30f}) {
    INFO("scale " << scale);
    for (size_t n : {w.size(), w.size() - 7, size_t{15}, size_t{1}}) {
      std::vector<uint16_t> got(n, 0xdead);
      fp8_e4m3_round_trip_to_bf16(w.data(), static_cast<int64_t>(n), scale, got.data());
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) {
        const uint16_t want = f32_to_bf16(fp8_e4m3_to_f32(f32_to_fp8_e4m3(w[i] / scale)) * scale);
        if (got[i] != want && ++wrong <= 5)
          FAIL_CHECK("w = " << w[i] << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(w[i]) << "): got 0x" << got[i]
                            << ", want 0x" << want);
      }
      CHECK(wrong == 0);
    }
  }
}
