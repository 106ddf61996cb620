// Compact bf16 panels (kernels/cpu/compact_panels.hpp): the format gives back every bit of the plain panels (few,
// many and no exceptions, stacked parts), its size is what the plan says, and the kernels that read it (the streamed
// decode at 1-4 tokens, the GEMMs, gated pairs, grains taken over) write the sums of its steps plus its exceptions
// added at each panel's end: bit for bit the plain panels' where a weight has no exceptions.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/amx_bf16.hpp"
#include "kernels/cpu/compact_panels.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "support/scoped_env.hpp"
#include "util/thread_pool.hpp"

using namespace actorllm;

namespace {

// The bf16 kernels set for a scope (AMX GEMMs or vdpbf16ps alone), back to the best when it ends.
class bf16_kernels_set {
 public:
  explicit bf16_kernels_set(cpu::bf16_kernels k) { cpu::set_bf16_kernels(k); }
  ~bf16_kernels_set() { cpu::set_bf16_kernels(cpu::bf16_kernels::best); }
  bf16_kernels_set(const bf16_kernels_set&) = delete;
  bf16_kernels_set& operator=(const bf16_kernels_set&) = delete;
};

constexpr int64_t panel_rows = 32;

int64_t k_pad_of(int64_t n_in) { return (n_in + 31) / 32 * 32; }

// bf16 [rows, n_in] drawn like a trained weight's values: normal, sd 0.02 (most values' high bytes among ~15), with
// a share `wild` of values of any sign, mantissa and a magnitude over 49 binades (mostly exceptions).
std::vector<uint16_t> weight_like(int64_t rows, int64_t n_in, double wild, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<uint16_t> w(static_cast<size_t>(rows * n_in));
  for (uint16_t& v : w) {
    if (coin(rng) < wild) {  // any sign and mantissa, magnitudes 2^-40 to 2^9 (sums stay finite)
      const uint64_t r = rng();
      const auto exponent = static_cast<uint16_t>(87 + r % 49);
      v = static_cast<uint16_t>(((r >> 8) & 0x8000) | exponent << 7 | ((r >> 24) & 0x7f));
      continue;
    }
    const float f = normal(rng);
    uint32_t u = 0;
    std::memcpy(&u, &f, sizeof u);
    v = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  }
  return w;
}

// The plain panels of stacked parts, panel after panel.
std::vector<uint16_t> plain_panels(const std::vector<std::vector<uint16_t>>& parts, const std::vector<int64_t>& rows,
                                   int64_t n_in) {
  std::vector<uint16_t> out;
  const size_t panel = static_cast<size_t>(k_pad_of(n_in) * panel_rows);
  for (size_t i = 0; i < parts.size(); ++i)
    for (int64_t p = 0; p < (rows[i] + panel_rows - 1) / panel_rows; ++p) {
      out.resize(out.size() + panel);
      cpu::pack_one_bf16_panel(parts[i].data(), rows[i], n_in, p, out.data() + out.size() - panel);
    }
  return out;
}

struct compacted {
  cpu::compact_panels_plan plan;
  std::vector<uint8_t> bytes;
};

compacted compact(const std::vector<std::vector<uint16_t>>& parts, const std::vector<int64_t>& rows, int64_t n_in,
                  thread_pool& pool) {
  std::vector<cpu::bf16_rows> in;
  for (size_t i = 0; i < parts.size(); ++i)
    in.push_back({parts[i].data(), rows[i]});
  compacted c{cpu::plan_compact_panels(in, n_in, pool), {}};
  c.bytes.resize(c.plan.bytes());
  cpu::write_compact_panels(c.plan, in, c.bytes.data(), pool);
  return c;
}

// Every panel of `c` expanded by the reference and by the vector kernels equals the plain panels; each panel's
// exceptions (its header's count) are the values whose high byte is neither 0x00 nor among the 15 most frequent other
// ones of its plain form, which the plan counted where the rows lie; its steps hold +0 at each, and its list has each
// whole value, by input and then output.
void check_round_trip(const compacted& c, const std::vector<uint16_t>& plain, int64_t n_in) {
  const int64_t k_pad = k_pad_of(n_in);
  const size_t panel = static_cast<size_t>(k_pad * panel_rows);
  REQUIRE(plain.size() == static_cast<size_t>(c.plan.n_panels) * panel);
  REQUIRE(c.plan.codings.size() == static_cast<size_t>(c.plan.n_panels));
  std::vector<uint32_t> expanded(panel / 2);
  int64_t exceptions = 0;
  for (int64_t p = 0; p < c.plan.n_panels; ++p) {
    CAPTURE(p);
    const uint8_t* compact = cpu::compact_panel(c.bytes.data(), p);
    REQUIRE(cpu::compact_panel_stride(compact) == c.plan.stride);
    cpu::expand_compact_panel_reference(compact, k_pad, expanded.data());
    const auto* plain_panel = reinterpret_cast<const uint32_t*>(plain.data() + static_cast<size_t>(p) * panel);
    REQUIRE(std::memcmp(expanded.data(), plain_panel, panel * 2) == 0);
    std::fill(expanded.begin(), expanded.end(), 0u);
    cpu::expand_compact_panel(compact, k_pad, expanded.data());  // the vector kernels (AMX GEMMs) where built
    REQUIRE(std::memcmp(expanded.data(), plain_panel, panel * 2) == 0);
    const int64_t expected = cpu::compact_panel_exceptions(plain_panel, k_pad);
    REQUIRE(cpu::compact_exception_count(compact) == expected);
    CHECK(c.plan.codings[static_cast<size_t>(p)].exceptions == expected);
    exceptions += expected;
    // The steps as the kernels read them: the plain panel but +0 at each exception, and the list has those values.
    cpu::expand_compact_panel_reference(compact, k_pad, expanded.data(), false);
    const auto* values = reinterpret_cast<const uint16_t*>(plain_panel);
    const auto* held = reinterpret_cast<const uint16_t*>(expanded.data());
    const cpu::compact_exception* list = cpu::compact_exception_list(compact, k_pad);
    int64_t listed = 0;
    for (int64_t k = 0; k < k_pad; ++k)
      for (int output = 0; output < panel_rows; ++output) {
        const size_t i = static_cast<size_t>((k / 2) * 64 + 2 * output + k % 2);
        if (held[i] == values[i])
          continue;
        CAPTURE(k);
        CAPTURE(output);
        REQUIRE(held[i] == 0);
        REQUIRE(listed < expected);
        CHECK(list[listed].k == static_cast<uint32_t>(k));
        CHECK(list[listed].output == output);
        CHECK(list[listed].value == values[i]);
        CHECK((values[i] >> 8) != 0);
        ++listed;
      }
    CHECK(listed == expected);
  }
  CHECK(c.plan.exceptions == exceptions);
}

}  // namespace

TEST_CASE("compact panels: byte positions are the order AVX-512's byte interleaves give values back in [asan]") {
  // vpunpcklbw / vpunpckhbw take bytes 0-7 / 8-15 of each 128-bit lane: value v of the first vector of 32 (v < 32)
  // comes from lane v / 8, byte v % 8; of the second from byte 8 + v % 8.
  std::vector<bool> seen(64, false);
  for (int v = 0; v < 64; ++v) {
    const int w = v % 32, pos = cpu::compact_position(v);
    CHECK(pos == 16 * (w / 8) + (v < 32 ? 0 : 8) + w % 8);
    REQUIRE(pos >= 0);
    REQUIRE(pos < 64);
    CHECK_FALSE(seen[static_cast<size_t>(pos)]);
    seen[static_cast<size_t>(pos)] = true;
  }
}

TEST_CASE("compact panels: every bit of the plain panels back, with few, many or no exceptions [asan]") {
  thread_pool pool(3);
  SUBCASE("weights like a trained model's: 3/4 of the plain bytes") {
    const int64_t rows = 200, n_in = 512;  // 7 panels, the last partial (zero rows)
    const auto w = weight_like(rows, n_in, 0.0, 1);
    const compacted c = compact({w}, {rows}, n_in, pool);
    check_round_trip(c, plain_panels({w}, {rows}, n_in), n_in);
    const size_t plain_bytes = cpu::bf16_panels_bytes(rows, n_in);
    CHECK(static_cast<double>(c.plan.bytes()) <= 0.76 * static_cast<double>(plain_bytes));
    CHECK(c.plan.stride % 64 == 0);
  }
  SUBCASE("one value in a hundred of any bit pattern, inputs not a multiple of 32") {
    const int64_t rows = 70, n_in = 300;
    const auto w = weight_like(rows, n_in, 0.01, 2);
    const compacted c = compact({w}, {rows}, n_in, pool);
    CHECK(c.plan.exceptions > 0);
    check_round_trip(c, plain_panels({w}, {rows}, n_in), n_in);
  }
  SUBCASE("every value of any bit pattern: most are exceptions, still exact") {
    const int64_t rows = 33, n_in = 64;
    const auto w = weight_like(rows, n_in, 1.0, 3);
    const compacted c = compact({w}, {rows}, n_in, pool);
    CHECK(c.plan.exceptions > rows * n_in / 2);
    check_round_trip(c, plain_panels({w}, {rows}, n_in), n_in);
  }
  SUBCASE("no exceptions: a weight of one value") {
    const std::vector<uint16_t> w(static_cast<size_t>(64 * 96), uint16_t{0x3c00});
    const compacted c = compact({w}, {64}, 96, pool);
    CHECK(c.plan.exceptions == 0);
    CHECK(c.plan.stride == cpu::compact_header_bytes + 96 / 4 * cpu::compact_block_bytes);
    check_round_trip(c, plain_panels({w}, {64}, 96), 96);
  }
  SUBCASE("zeros and values below 2^-125 are code 0, never exceptions, and take none of the 15 codes") {
    std::vector<uint16_t> w(static_cast<size_t>(32 * 64));
    for (size_t i = 0; i < w.size(); ++i)  // 15 high bytes, and zeros or tiny values between
      w[i] = i % 3 == 0 ? static_cast<uint16_t>(i % 256) : static_cast<uint16_t>((0x30 + i / 3 % 15) << 8 | (i % 256));
    const compacted c = compact({w}, {32}, 64, pool);
    CHECK(c.plan.exceptions == 0);
    CHECK(c.plan.codings[0].codes == 15);
    check_round_trip(c, plain_panels({w}, {32}, 64), 64);
  }
  SUBCASE("stacked parts: each part's panels in turn, one stride") {
    const int64_t n_in = 128;
    const auto q = weight_like(64, n_in, 0.001, 4), k = weight_like(32, n_in, 0.05, 5), v = weight_like(40, n_in, 0, 6);
    const compacted c = compact({q, k, v}, {64, 32, 40}, n_in, pool);
    CHECK(c.plan.n_panels == 2 + 1 + 2);
    CHECK(c.plan.n_rows == 136);
    check_round_trip(c, plain_panels({q, k, v}, {64, 32, 40}, n_in), n_in);
  }
}

TEST_CASE("compact panels: a stride too small for a panel's exceptions is refused, and a bad setting by name") {
  const int64_t n_in = 64;
  const auto w = weight_like(32, n_in, 1.0, 7);
  std::vector<uint16_t> plain(static_cast<size_t>(k_pad_of(n_in) * panel_rows));
  cpu::pack_one_bf16_panel(w.data(), 32, n_in, 0, plain.data());
  const auto* pairs = reinterpret_cast<const uint32_t*>(plain.data());
  const int64_t exceptions = cpu::compact_panel_exceptions(pairs, k_pad_of(n_in));
  REQUIRE(exceptions > 0);
  const size_t fixed = cpu::compact_exceptions_offset(k_pad_of(n_in));
  std::vector<uint8_t> out(fixed + static_cast<size_t>(exceptions) * sizeof(cpu::compact_exception));
  CHECK_THROWS_AS(cpu::compact_panel_from_plain(pairs, k_pad_of(n_in), out.size() - 1, out.data()), std::logic_error);
  CHECK(cpu::compact_panel_from_plain(pairs, k_pad_of(n_in), out.size(), out.data()) == exceptions);

  {
    const test::scoped_env off("ACTORLLM_COMPACT_PANELS", "off");
    CHECK_FALSE(cpu::compact_panels_wanted());
  }
  {
    const test::scoped_env on("ACTORLLM_COMPACT_PANELS", "on");
    CHECK(cpu::compact_panels_wanted() == cpu::have_compact_panel_kernels());
  }
  const test::scoped_env bad("ACTORLLM_COMPACT_PANELS", "yes");
  try {
    (void)cpu::compact_panels_wanted();
    FAIL("a bad value was taken");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("ACTORLLM_COMPACT_PANELS") != std::string::npos);
  }
}

namespace {

// x rounded to bf16 and back: the inputs the kernels multiply (they round x to bf16 first).
std::vector<float> bf16_inputs(size_t n, uint64_t seed) {
  const std::vector<float> x = test::random_floats(n, seed);
  std::vector<uint16_t> b(n);
  cpu::convert_from_f32(x.data(), static_cast<int64_t>(n), dtype::bf16, b.data());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t{b[i]} << 16;
    std::memcpy(&out[i], &u, sizeof u);
  }
  return out;
}

float bf16_float(uint16_t v) {
  const uint32_t u = uint32_t{v} << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// What the kernels write for compact weight `compact` ([n_out, n_in]) at x (bf16 values): the plain panels of its steps
// (+0 at each exception) through the same plain-panel kernels without the bias, then each panel's exceptions added
// in the list's order (value x input), then the bias.
std::vector<float> compact_sums(const std::vector<uint8_t>& compact, int64_t n_out, int64_t n_in, const float* bias,
                                const std::vector<float>& x, int64_t n_tokens, thread_pool& pool) {
  const int64_t k_pad = k_pad_of(n_in), n_panels = (n_out + panel_rows - 1) / panel_rows;
  std::vector<uint32_t> held(static_cast<size_t>(n_panels * k_pad / 2 * panel_rows));
  for (int64_t p = 0; p < n_panels; ++p)
    cpu::expand_compact_panel_reference(cpu::compact_panel(compact.data(), p), k_pad,
                                        held.data() + static_cast<size_t>(p * k_pad / 2 * panel_rows), false);
  std::vector<float> y(static_cast<size_t>(n_tokens * n_out));
  const cpu::matmul_target t{held.data(), dtype::bf16, n_out, nullptr, y.data(), true};
  cpu::matmul_group(x.data(), n_tokens, n_in, {&t, 1}, pool);
  for (int64_t p = 0; p < n_panels; ++p) {
    const uint8_t* panel = cpu::compact_panel(compact.data(), p);
    const cpu::compact_exception* e = cpu::compact_exception_list(panel, k_pad);
    for (int64_t i = 0; i < cpu::compact_exception_count(panel); ++i)
      for (int64_t tok = 0; tok < n_tokens; ++tok)
        y[static_cast<size_t>(tok * n_out + p * panel_rows + e[i].output)] +=
            bf16_float(e[i].value) * x[static_cast<size_t>(tok * n_in + e[i].k)];
  }
  if (bias != nullptr)
    for (int64_t tok = 0; tok < n_tokens; ++tok)
      for (int64_t o = 0; o < n_out; ++o)
        y[static_cast<size_t>(tok * n_out + o)] += bias[o];
  return y;
}

}  // namespace

// The matmuls on compact panels: the sums of their steps plus their exceptions (compact_sums), at every token count
// that picks another kernel (the streamed decode's 1-4, the panel GEMM streaming up to 48 and in chunks past it), in
// groups of uneven targets, gated, with grains taken over (owners) and without, on vdpbf16ps alone and with the AMX
// GEMMs where this CPU has them (which expand every value, and so give the plain panels' bits); on weights without
// exceptions, the plain panels' bits everywhere.
TEST_CASE("compact panels: the matmuls write the sums of their steps plus their exceptions [asan]") {
  if (!cpu::have_compact_panel_kernels()) {
    MESSAGE("skipped: this build has no compact-panel kernels (AVX512-VBMI with AVX512-BF16)");
    return;
  }
  uint64_t seed = 40;
  for (const auto& [kernels, threads] : {std::pair{cpu::bf16_kernels::dot, 1},
                                         {cpu::bf16_kernels::dot, 3},
                                         {cpu::bf16_kernels::best, 1},
                                         {cpu::bf16_kernels::best, 3}}) {
    const bf16_kernels_set set(kernels);
    thread_pool pool(threads);
    // On AMX: 5-32 tokens rebuild each step of a panel as the tiles take it (16 and 32 rows; up to 16 two panels at a
    // time; tiles of only the rows that hold tokens, as at 5, 13, 17 and 29), 33-64 a K block (128 pair rows) at a
    // time: at 48 and 49 tokens over 300 inputs, two K blocks, the second a partial one; 400 expand it.
    for (int64_t n_tokens : {1, 2, 3, 4, 5, 13, 16, 17, 29, 32, 48, 49, 400}) {
      const bool amx = kernels == cpu::bf16_kernels::best && cpu::amx_bf16_usable() && n_tokens > 4;
      CAPTURE(static_cast<int>(kernels));
      CAPTURE(threads);
      CAPTURE(n_tokens);
      // k_pad 160 (or 320): blocks of two steps, and inputs past n_in
      const int64_t n_in = n_tokens == 48 || n_tokens == 49 ? 300 : 136;
      const std::vector<int64_t> n_outs = {1100, 33, 64, 257, 96};
      const auto x = bf16_inputs(static_cast<size_t>(n_tokens * n_in), seed++);
      std::vector<std::vector<uint16_t>> w;
      std::vector<std::vector<uint8_t>> plain, packed;
      std::vector<std::shared_ptr<const std::vector<uint8_t>>> owned;
      std::vector<std::vector<float>> bias, y_plain, y_compact, y_owned;
      for (size_t i = 0; i < n_outs.size(); ++i) {
        if (i == 4) {  // fifteen high bytes and zeros: no exceptions
          std::vector<uint16_t> few(static_cast<size_t>(n_outs[i] * n_in));
          std::mt19937_64 rng(seed++);
          for (uint16_t& v : few)
            v = rng() % 7 == 0 ? uint16_t{0} : static_cast<uint16_t>((0x38 + rng() % 15) << 8 | (rng() & 0xff));
          w.push_back(std::move(few));
        } else {
          w.push_back(weight_like(n_outs[i], n_in, i == 1 ? 0.3 : 0.002, seed++));
        }
        const auto p = plain_panels({w.back()}, {n_outs[i]}, n_in);
        plain.emplace_back(reinterpret_cast<const uint8_t*>(p.data()),
                           reinterpret_cast<const uint8_t*>(p.data() + p.size()));
        const compacted c = compact({w.back()}, {n_outs[i]}, n_in, pool);
        REQUIRE((c.plan.exceptions == 0) == (i == 4));
        packed.push_back(c.bytes);
        owned.push_back(std::make_shared<const std::vector<uint8_t>>(packed.back()));
        bias.push_back(test::random_floats(static_cast<size_t>(n_outs[i]), seed++));
        for (auto* y : {&y_plain, &y_compact, &y_owned})
          y->emplace_back(static_cast<size_t>(n_tokens * n_outs[i]), -777.0f);
      }
      std::vector<cpu::matmul_target> t_plain, t_compact, t_owned;
      for (size_t i = 0; i < n_outs.size(); ++i) {
        const float* b = i % 2 == 1 ? bias[i].data() : nullptr;
        t_plain.push_back({plain[i].data(), dtype::bf16, n_outs[i], b, y_plain[i].data(), true});
        t_compact.push_back({packed[i].data(), dtype::bf16, n_outs[i], b, y_compact[i].data(), true, nullptr, true});
        t_owned.push_back({owned[i]->data(), dtype::bf16, n_outs[i], b, y_owned[i].data(), true, owned[i], true});
      }
      // A group holds 8 targets at most: the first four, then the fifth alone.
      for (const auto& [first, count] : {std::pair<size_t, size_t>{0, 4}, {4, 1}}) {
        cpu::matmul_group(x.data(), n_tokens, n_in, std::span(t_plain).subspan(first, count), pool);
        cpu::matmul_group(x.data(), n_tokens, n_in, std::span(t_compact).subspan(first, count), pool);
        cpu::matmul_group(x.data(), n_tokens, n_in, std::span(t_owned).subspan(first, count), pool);
      }
      for (size_t i = 0; i < n_outs.size(); ++i) {
        CAPTURE(i);
        const std::vector<float> expected =
            amx || i == 4 ? y_plain[i] : compact_sums(packed[i], n_outs[i], n_in, t_plain[i].bias, x, n_tokens, pool);
        REQUIRE(std::memcmp(y_compact[i].data(), expected.data(), expected.size() * sizeof(float)) == 0);
        REQUIRE(std::memcmp(y_owned[i].data(), expected.data(), expected.size() * sizeof(float)) == 0);
        if (i == 4)  // and so the plain panels' bits, without exceptions
          REQUIRE(std::memcmp(y_compact[i].data(), y_plain[i].data(), expected.size() * sizeof(float)) == 0);
        // And near the plain panels' sums and the float64 sum (x is bf16 already, so the products are exact): within a
        // few roundings of the sum of |w x|. The float64 sum holds the AMX path, whose expected bits above are its own
        // plain panels', to every output (a panel no thread computed stays at -777).
        for (int64_t tok = 0; tok < n_tokens; ++tok)
          for (int64_t o = 0; o < n_outs[i]; ++o) {
            double magnitude = 0.0, exact = t_plain[i].bias != nullptr ? t_plain[i].bias[o] : 0.0;
            for (int64_t k = 0; k < n_in; ++k) {
              const double product = static_cast<double>(bf16_float(w[i][static_cast<size_t>(o * n_in + k)])) *
                                     x[static_cast<size_t>(tok * n_in + k)];
              magnitude += std::fabs(product);
              exact += product;
            }
            const size_t j = static_cast<size_t>(tok * n_outs[i] + o);
            REQUIRE(std::fabs(static_cast<double>(y_compact[i][j]) - y_plain[i][j]) <= 3e-5 * magnitude + 1e-6);
            REQUIRE(std::fabs(static_cast<double>(y_compact[i][j]) - exact) <= 3e-5 * magnitude + 1e-6);
          }
      }

      // A gated pair (SwiGLU) as one stacked gate|up weight: silu(gate) x up of the two apart.
      const int64_t n_ff = 320;
      const auto wg = weight_like(n_ff, n_in, 0.01, seed++), wu = weight_like(n_ff, n_in, 0.01, seed++);
      const compacted stacked = compact({wg, wu}, {n_ff, n_ff}, n_in, pool);
      const auto holder = std::make_shared<const std::vector<uint8_t>>(stacked.bytes);
      const uint8_t* up_panels = cpu::compact_panel(holder->data(), n_ff / 32);
      std::vector<float> up(static_cast<size_t>(n_tokens * n_ff)), out_compact(up.size());
      cpu::matmul_silu_gate(x.data(), n_tokens, n_in, holder->data(), up_panels, dtype::bf16, true, true, n_ff,
                            up.data(), out_compact.data(), pool, cpu::matmul_path::automatic, holder, holder);
      std::vector<float> gate_apart(up.size()), up_apart(up.size()), out_apart(up.size());
      const cpu::matmul_target tg{holder->data(), dtype::bf16, n_ff, nullptr, gate_apart.data(), true, nullptr, true};
      const cpu::matmul_target tu{up_panels, dtype::bf16, n_ff, nullptr, up_apart.data(), true, nullptr, true};
      cpu::matmul_group(x.data(), n_tokens, n_in, {&tg, 1}, pool);
      cpu::matmul_group(x.data(), n_tokens, n_in, {&tu, 1}, pool);
      cpu::silu_mul(gate_apart.data(), up_apart.data(), static_cast<int64_t>(up.size()), out_apart.data());
      REQUIRE(std::memcmp(out_compact.data(), out_apart.data(), out_apart.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("compact panels: a damaged exception list changes the sums (the kernels read it)") {
  if (!cpu::have_compact_panel_kernels()) {
    MESSAGE("skipped: this build has no compact-panel kernels (AVX512-VBMI with AVX512-BF16)");
    return;
  }
  thread_pool pool(1);
  const int64_t n_in = 64, n_out = 32;
  const auto w = weight_like(n_out, n_in, 0.05, 9);
  const compacted c = compact({w}, {n_out}, n_in, pool);
  REQUIRE(c.plan.exceptions > 0);
  std::vector<uint8_t> damaged = c.bytes;
  // The first exception's value made 2.0 (never a value of a weight like this one's exceptions).
  auto* first =
      reinterpret_cast<cpu::compact_exception*>(damaged.data() + cpu::compact_exceptions_offset(k_pad_of(n_in)));
  REQUIRE(first->value != 0x4000);
  first->value = 0x4000;
  for (const auto kernels : {cpu::bf16_kernels::dot, cpu::bf16_kernels::best})
    for (const int64_t n_tokens : {1, 2, 8}) {  // the streamed decode, and the GEMMs
      CAPTURE(static_cast<int>(kernels));
      CAPTURE(n_tokens);
      const bf16_kernels_set set(kernels);
      const auto x = test::random_floats(static_cast<size_t>(n_tokens * n_in), 10);
      std::vector<float> y(static_cast<size_t>(n_tokens * n_out)), y_damaged(y.size());
      const cpu::matmul_target t{c.bytes.data(), dtype::bf16, n_out, nullptr, y.data(), true, nullptr, true};
      cpu::matmul_group(x.data(), n_tokens, n_in, {&t, 1}, pool);
      const cpu::matmul_target td{damaged.data(), dtype::bf16, n_out, nullptr, y_damaged.data(), true, nullptr, true};
      cpu::matmul_group(x.data(), n_tokens, n_in, {&td, 1}, pool);
      CHECK(std::memcmp(y.data(), y_damaged.data(), y.size() * sizeof(float)) != 0);
    }
}

TEST_CASE(
    "compact panels: the streamed decode's sums are the same with 1 to 4 streams side by side, with 512-bit and "
    "256-bit dot products [asan]") {
  // The CPU's pattern picks how many compact streams a thread walks at 1-4 tokens (four on Zen 5, two elsewhere) and
  // whether one token's dot products are 256 bits wide (Intel); every count and width must give the same bits: the
  // sums of the steps plus the exceptions, with homes (owners) and guided grains.
  if (!cpu::have_compact_panel_kernels()) {
    MESSAGE("skipped: this build has no compact-panel kernels (AVX512-VBMI with AVX512-BF16)");
    return;
  }
  struct pattern_scope {
    explicit pattern_scope(cpu::decode_read_pattern p) { cpu::set_decode_read_pattern(p); }
    ~pattern_scope() { cpu::set_decode_read_pattern(std::nullopt); }
    pattern_scope(const pattern_scope&) = delete;
    pattern_scope& operator=(const pattern_scope&) = delete;
  };
  const int64_t n_in = 200, n_out = 32 * 37 + 5;  // panels that split unevenly into streams, and a part panel
  thread_pool pool(2);
  const auto w = weight_like(n_out, n_in, 0.002, 77);
  const compacted c = compact({w}, {n_out}, n_in, pool);
  REQUIRE(c.plan.exceptions > 0);
  const auto owned = std::make_shared<const std::vector<uint8_t>>(c.bytes);
  for (int64_t n_tokens : {1, 2, 3, 4}) {
    const auto x = bf16_inputs(static_cast<size_t>(n_tokens * n_in), 80 + static_cast<uint64_t>(n_tokens));
    const std::vector<float> expected = compact_sums(c.bytes, n_out, n_in, nullptr, x, n_tokens, pool);
    for (int way = 0; way < 8; ++way) {
      const int streams = way % 4 + 1;
      const bool narrow = way >= 4;
      CAPTURE(n_tokens);
      CAPTURE(streams);
      CAPTURE(narrow);
      cpu::decode_read_pattern p = cpu::decode_read_pattern_for(cpu::cpu_vendor(), cpu::cpu_family());
      p.compact_streams = streams;
      p.compact_narrow_dots = narrow;
      const pattern_scope scope(p);
      std::vector<float> y(expected.size(), -777.0f), y_owned(expected.size(), -777.0f);
      const cpu::matmul_target t{c.bytes.data(), dtype::bf16, n_out, nullptr, y.data(), true, nullptr, true};
      const cpu::matmul_target t_owned{owned->data(), dtype::bf16, n_out, nullptr, y_owned.data(), true, owned, true};
      cpu::matmul_group(x.data(), n_tokens, n_in, {&t, 1}, pool);
      cpu::matmul_group(x.data(), n_tokens, n_in, {&t_owned, 1}, pool);
      REQUIRE(std::memcmp(y.data(), expected.data(), expected.size() * sizeof(float)) == 0);
      REQUIRE(std::memcmp(y_owned.data(), expected.data(), expected.size() * sizeof(float)) == 0);
    }
  }
}
