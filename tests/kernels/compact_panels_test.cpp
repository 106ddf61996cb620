// Compact bf16 panels (kernels/cpu/compact_panels.hpp): the format gives back every bit of the plain panels (few,
// many and no exceptions, stacked parts), its size is what the plan says, and the kernels that read it (the streamed
// decode at 1-4 tokens, the GEMMs that expand panels, gated pairs, grains taken over) write the same bits as on plain
// panels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/compact_panels.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "support/scoped_env.hpp"
#include "util/thread_pool.hpp"

using namespace actorllm;

namespace {

// The streamed decode kernels set to find compact panels' exceptions by the escape map or at every step (as on Zen and
// on Intel), back to this CPU's way when it goes out of scope.
class exceptions_found_by {
 public:
  explicit exceptions_found_by(bool escape_map) {
    cpu::decode_read_pattern p = cpu::decode_read_pattern_for(cpu::cpu_vendor());
    p.compact_batch1_every_step = !escape_map;
    cpu::set_decode_read_pattern(p);
  }
  ~exceptions_found_by() { cpu::set_decode_read_pattern(std::nullopt); }
  exceptions_found_by(const exceptions_found_by&) = delete;
  exceptions_found_by& operator=(const exceptions_found_by&) = delete;
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
// exceptions (its header's count) are those of the 15 most frequent high bytes of its plain form, which the plan
// counted where the rows lie.
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
    uint64_t in_header = 0;
    std::memcpy(&in_header, compact + 24, sizeof in_header);
    const int64_t expected = cpu::compact_panel_exceptions(plain_panel, k_pad);
    CHECK(static_cast<int64_t>(in_header) == expected);
    // The escape map marks exactly the steps with an exception (code 0 in their low or high nibbles).
    const uint8_t* map = compact + cpu::compact_header_bytes;
    const uint8_t* blocks = compact + cpu::compact_blocks_offset(k_pad);
    int64_t marked_exceptions = 0;
    for (int64_t step = 0; step < k_pad / 2; ++step) {
      const uint8_t* codes = blocks + static_cast<size_t>(step / 2) * cpu::compact_block_bytes + 128;
      int64_t escaped = 0;
      for (int pos = 0; pos < 64; ++pos)
        escaped += ((codes[pos] >> (step % 2 == 0 ? 0 : 4)) & 0xf) == 0;
      const bool marked = ((map[step / 8] >> (step % 8)) & 1) != 0;
      CAPTURE(step);
      REQUIRE(marked == (escaped > 0));
      marked_exceptions += escaped;
    }
    for (size_t byte = static_cast<size_t>(k_pad / 16); byte < cpu::compact_escape_map_bytes(k_pad); ++byte)
      REQUIRE(map[byte] == 0);  // past the last step's bit
    CHECK(marked_exceptions == expected);
    CHECK(c.plan.codings[static_cast<size_t>(p)].exceptions == expected);
    exceptions += expected;
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
    CHECK(c.plan.stride == cpu::compact_header_bytes + 64 + 96 / 4 * cpu::compact_block_bytes +
                               cpu::compact_exception_slack);  // a map of 48 bits takes 64 bytes
    check_round_trip(c, plain_panels({w}, {64}, 96), 96);
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
  std::vector<uint8_t> out(fixed + static_cast<size_t>(exceptions) + cpu::compact_exception_slack);
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

// The matmuls on compact panels against the same weights' plain panels: the same bits, at every token count that
// picks another kernel (the streamed decode's 1-4, the panel GEMM streaming up to 48 and in chunks past it), in groups
// of uneven targets, gated, with grains taken over (owners) and without; the streamed decode finding exceptions by the
// escape map and at every step (only it looks at the setting).
TEST_CASE("compact panels: the matmuls write the bits plain panels give [asan]") {
  if (!cpu::have_compact_panel_kernels()) {
    MESSAGE("skipped: this build has no compact-panel kernels (AVX512-VBMI with AVX512-BF16)");
    return;
  }
  uint64_t seed = 40;
  for (const auto& [escape_map, threads] : {std::pair{true, 1}, {true, 3}, {false, 1}, {false, 3}}) {
    const exceptions_found_by way(escape_map);
    thread_pool pool(threads);
    for (int64_t n_tokens : {1, 2, 3, 4, 5, 13, 48, 49, 400}) {
      if (!escape_map && n_tokens > 4)
        break;
      CAPTURE(escape_map);
      CAPTURE(threads);
      CAPTURE(n_tokens);
      const int64_t n_in = 136;  // k_pad 160: blocks of two steps, and inputs past n_in
      const std::vector<int64_t> n_outs = {1100, 33, 64, 257};
      const auto x = test::random_floats(static_cast<size_t>(n_tokens * n_in), seed++);
      std::vector<std::vector<uint16_t>> w;
      std::vector<std::vector<uint8_t>> plain, packed;
      std::vector<std::shared_ptr<const std::vector<uint8_t>>> owned;
      std::vector<std::vector<float>> bias, y_plain, y_compact, y_owned;
      for (size_t i = 0; i < n_outs.size(); ++i) {
        w.push_back(weight_like(n_outs[i], n_in, i == 1 ? 0.3 : 0.002, seed++));
        const auto p = plain_panels({w.back()}, {n_outs[i]}, n_in);
        plain.emplace_back(reinterpret_cast<const uint8_t*>(p.data()),
                           reinterpret_cast<const uint8_t*>(p.data() + p.size()));
        packed.push_back(compact({w.back()}, {n_outs[i]}, n_in, pool).bytes);
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
      cpu::matmul_group(x.data(), n_tokens, n_in, t_plain, pool);
      cpu::matmul_group(x.data(), n_tokens, n_in, t_compact, pool);
      cpu::matmul_group(x.data(), n_tokens, n_in, t_owned, pool);
      for (size_t i = 0; i < n_outs.size(); ++i) {
        CAPTURE(i);
        REQUIRE(std::memcmp(y_compact[i].data(), y_plain[i].data(), y_plain[i].size() * sizeof(float)) == 0);
        REQUIRE(std::memcmp(y_owned[i].data(), y_plain[i].data(), y_plain[i].size() * sizeof(float)) == 0);
      }

      // A gated pair (SwiGLU), apart and as one stacked gate|up weight.
      const int64_t n_ff = 320;
      const auto wg = weight_like(n_ff, n_in, 0.01, seed++), wu = weight_like(n_ff, n_in, 0.01, seed++);
      const auto pg = plain_panels({wg}, {n_ff}, n_in), pu = plain_panels({wu}, {n_ff}, n_in);
      const compacted stacked = compact({wg, wu}, {n_ff, n_ff}, n_in, pool);
      std::vector<float> up(static_cast<size_t>(n_tokens * n_ff)), out_plain(up.size()), out_compact(up.size());
      cpu::matmul_silu_gate(x.data(), n_tokens, n_in, pg.data(), pu.data(), dtype::bf16, true, false, n_ff, up.data(),
                            out_plain.data(), pool);
      const auto holder = std::make_shared<const std::vector<uint8_t>>(stacked.bytes);
      cpu::matmul_silu_gate(x.data(), n_tokens, n_in, holder->data(), cpu::compact_panel(holder->data(), n_ff / 32),
                            dtype::bf16, true, true, n_ff, up.data(), out_compact.data(), pool,
                            cpu::matmul_path::automatic, holder, holder);
      REQUIRE(std::memcmp(out_compact.data(), out_plain.data(), out_plain.size() * sizeof(float)) == 0);
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
  const auto x = test::random_floats(static_cast<size_t>(n_in), 10);
  std::vector<uint8_t> damaged = c.bytes;
  // The first exception's high byte made 0x40 (a value of 2 to 4, never among a weight like this one's codes).
  uint8_t& first = damaged[cpu::compact_exceptions_offset(k_pad_of(n_in))];
  REQUIRE(first != 0x40);
  first = 0x40;
  for (const bool escape_map : {true, false}) {  // the streamed decode finding exceptions both ways
    CAPTURE(escape_map);
    const exceptions_found_by way(escape_map);
    std::vector<float> y(n_out), y_damaged(n_out);
    const cpu::matmul_target t{c.bytes.data(), dtype::bf16, n_out, nullptr, y.data(), true, nullptr, true};
    cpu::matmul_group(x.data(), 1, n_in, {&t, 1}, pool);
    const cpu::matmul_target td{damaged.data(), dtype::bf16, n_out, nullptr, y_damaged.data(), true, nullptr, true};
    cpu::matmul_group(x.data(), 1, n_in, {&td, 1}, pool);
    CHECK(std::memcmp(y.data(), y_damaged.data(), y.size() * sizeof(float)) != 0);
  }
}
