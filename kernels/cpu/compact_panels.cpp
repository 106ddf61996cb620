#include "kernels/cpu/compact_panels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "util/check.hpp"
#include "util/thread_pool.hpp"

namespace actorllm::cpu {

namespace {

constexpr int64_t panel_rows = 32;
constexpr int step_values = 64;  // bf16 values of one plain step: 32 outputs x 2 inputs
constexpr size_t table_entries = 16;

constexpr std::array<uint8_t, step_values> positions() {
  std::array<uint8_t, step_values> p{};
  for (int v = 0; v < step_values; ++v) {
    const int w = v % 32;  // the value's place in its vector of 32 (v < 32: the first)
    p[static_cast<size_t>(v)] = static_cast<uint8_t>(16 * (w / 8) + (v < 32 ? 0 : 8) + w % 8);
  }
  return p;
}
constexpr std::array<uint8_t, step_values> position_of = positions();

constexpr std::array<uint8_t, step_values> values_at() {
  std::array<uint8_t, step_values> v{};
  for (int i = 0; i < step_values; ++i)
    v[position_of[static_cast<size_t>(i)]] = static_cast<uint8_t>(i);
  return v;
}
constexpr std::array<uint8_t, step_values> value_at = values_at();  // position -> value

using byte_counts = std::array<int64_t, 256>;

// Adds the high bytes of n bf16 values to `count`. Eight histograms of 32-bit counts, four values from each 64-bit
// load: a panel's values have few high bytes, so one histogram would wait on its own increments (with four of 64-bit
// counts, one value at a time, 1.1 ns a value on Zen 4 against 0.4).
void count_high_bytes(const uint16_t* values, int64_t n, byte_counts& count) {
  // A panel's values (32 rows): far fewer than 2^35.
  ACTORLLM_CHECK(n / 8 < (int64_t{1} << 32), "compact panels: too many values to count in 32 bits");
  std::array<std::array<uint32_t, 256>, 8> part{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t a = 0, b = 0;
    std::memcpy(&a, values + i, sizeof a);
    std::memcpy(&b, values + i + 4, sizeof b);
    ++part[0][(a >> 8) & 0xff];
    ++part[1][(a >> 24) & 0xff];
    ++part[2][(a >> 40) & 0xff];
    ++part[3][a >> 56];
    ++part[4][(b >> 8) & 0xff];
    ++part[5][(b >> 24) & 0xff];
    ++part[6][(b >> 40) & 0xff];
    ++part[7][b >> 56];
  }
  for (; i < n; ++i)
    ++count[values[i] >> 8];
  for (const auto& h : part)
    for (size_t b8 = 0; b8 < 256; ++b8)
      count[b8] += h[b8];
}

// The coding of n_values values whose high bytes are counted in `count`: 0x00 is code 0 (table entry 0), the 15 most
// frequent other bytes codes 1-15.
compact_panel_coding code_from_counts(const byte_counts& count, int64_t n_values) {
  std::array<uint8_t, 255> order{};
  std::iota(order.begin(), order.end(), uint8_t{1});
  std::stable_sort(order.begin(), order.end(), [&](uint8_t a, uint8_t b) { return count[a] > count[b]; });
  compact_panel_coding coding;
  int64_t covered = count[0];
  for (size_t c = 1; c < table_entries; ++c) {
    const uint8_t hi = order[c - 1];
    if (count[hi] == 0)
      break;
    coding.table[c] = hi;
    coding.codes = static_cast<int>(c);
    covered += count[hi];
  }
  coding.exceptions = n_values - covered;
  return coding;
}

// A coding's inverse: high byte -> code (0: 0x00, or an exception). The scalar encoder's (the AVX-512 one compares).
[[maybe_unused]] std::array<uint8_t, 256> codes_of(const compact_panel_coding& coding) {
  std::array<uint8_t, 256> code_of{};
  for (int c = 1; c <= coding.codes; ++c)
    code_of[coding.table[static_cast<size_t>(c)]] = static_cast<uint8_t>(c);
  return code_of;
}

compact_panel_coding code_for(const uint16_t* plain, int64_t n_values) {
  byte_counts count{};
  count_high_bytes(plain, n_values, count);
  return code_from_counts(count, n_values);
}

int64_t steps_of(int64_t k_pad) { return k_pad / 2; }
int64_t values_of(int64_t k_pad) { return steps_of(k_pad) * step_values; }

// Step s's exceptions (the values `escaped` marks, by position) appended at `out`, by input and then output; the end of
// the list.
compact_exception* list_exceptions(const uint16_t* plain, int64_t s, uint64_t escaped, compact_exception* out) {
  for (int parity = 0; parity < 2; ++parity)
    for (int output = 0; output < panel_rows; ++output) {
      const int v = 2 * output + parity;
      if ((escaped >> position_of[static_cast<size_t>(v)] & 1) != 0)
        *out++ = {.k = static_cast<uint32_t>(2 * s + parity),
                  .output = static_cast<uint16_t>(output),
                  .value = plain[s * step_values + v]};
    }
  return out;
}

#if defined(__AVX512VBMI__)
// The steps of one panel encoded with AVX-512 (as compact_panel_from_plain's loop does, ~10x faster: start-up packs
// every weight; the end of the exceptions written): `vpermt2b` gathers a step's low and high bytes in the compact
// order, one compare per used code gives the codes, and a step with exceptions lists them.
compact_exception* encode_steps(const compact_panel_coding& pc, const uint16_t* plain, int64_t n_steps, uint8_t* blocks,
                                compact_exception* exceptions) {
  alignas(64) uint8_t low_index[step_values], high_index[step_values];
  for (int pos = 0; pos < step_values; ++pos) {
    // Byte 2v of the 128 bytes [first vector | second vector] is value v's low byte (v < 32 in the first).
    low_index[pos] = static_cast<uint8_t>(2 * value_at[static_cast<size_t>(pos)]);
    high_index[pos] = static_cast<uint8_t>(low_index[pos] + 1);
  }
  const __m512i lows = _mm512_load_si512(low_index), highs = _mm512_load_si512(high_index);
  for (int64_t s = 0; s < n_steps; ++s) {
    uint8_t* block = blocks + static_cast<size_t>(s / 2) * compact_block_bytes;
    const __m512i first = _mm512_loadu_si512(plain + s * step_values);
    const __m512i second = _mm512_loadu_si512(plain + s * step_values + 32);
    const __m512i hi = _mm512_permutex2var_epi8(first, highs, second);
    __m512i code = _mm512_setzero_si512();
    for (int c = 1; c <= pc.codes; ++c)
      code = _mm512_mask_mov_epi8(
          code, _mm512_cmpeq_epi8_mask(hi, _mm512_set1_epi8(static_cast<char>(pc.table[static_cast<size_t>(c)]))),
          _mm512_set1_epi8(static_cast<char>(c)));
    // Code 0 where the high byte is not 0x00: an exception, whose low byte is 0 here.
    const __mmask64 escaped = _mm512_mask_test_epi8_mask(_mm512_testn_epi8_mask(code, code), hi, hi);
    _mm512_storeu_si512(block + (s % 2) * step_values,
                        _mm512_maskz_mov_epi8(~escaped, _mm512_permutex2var_epi8(first, lows, second)));
    if (s % 2 == 0)
      _mm512_storeu_si512(block + 2 * step_values, code);
    else  // the odd step's codes in the high nibbles (codes < 16: a 16-bit shift by 4 stays within each byte)
      _mm512_storeu_si512(block + 2 * step_values,
                          _mm512_or_si512(_mm512_loadu_si512(block + 2 * step_values), _mm512_slli_epi16(code, 4)));
    if (escaped != 0)
      exceptions = list_exceptions(plain, s, escaped, exceptions);
  }
  return exceptions;
}
#endif

// Panel g of the stacked parts: its part, and its index there.
std::pair<const bf16_rows&, int64_t> part_panel(std::span<const bf16_rows> parts, int64_t g) {
  int64_t first = 0;  // the part's first panel
  for (const bf16_rows& part : parts) {
    const int64_t n_panels = (part.n_rows + panel_rows - 1) / panel_rows;
    if (g < first + n_panels)
      return {part, g - first};
    first += n_panels;
  }
  ACTORLLM_CHECK(false, "compact panels: a panel past the parts");
  return {parts.front(), 0};
}

// Panel `plain` (k_pad / 2 x 32 pairs) encoded with coding `pc` into `out` (`stride` bytes): header, blocks,
// exceptions and zeros. A stride too small for pc's exceptions is refused (std::logic_error).
void encode_panel(const compact_panel_coding& pc, const uint16_t* plain, int64_t k_pad, size_t stride, uint8_t* out) {
  const size_t fixed = compact_exceptions_offset(k_pad);
  if (fixed + static_cast<size_t>(pc.exceptions) * sizeof(compact_exception) > stride)
    throw std::logic_error("compact panels: the panel has " + std::to_string(pc.exceptions) +
                           " exceptions, more than its stride of " + std::to_string(stride) + " bytes holds");
  std::memset(out, 0, compact_header_bytes);
  std::memcpy(out, pc.table.data(), table_entries);
  const auto stride64 = static_cast<uint64_t>(stride);
  const auto exceptions64 = static_cast<uint64_t>(pc.exceptions);
  std::memcpy(out + 16, &stride64, sizeof stride64);
  std::memcpy(out + 24, &exceptions64, sizeof exceptions64);
  auto* exceptions = reinterpret_cast<compact_exception*>(out + fixed);
  const int64_t n_steps = steps_of(k_pad);
  uint8_t* blocks = out + compact_blocks_offset;
#if defined(__AVX512VBMI__)
  compact_exception* end = encode_steps(pc, plain, n_steps, blocks, exceptions);
#else
  const std::array<uint8_t, 256> code_of = codes_of(pc);
  std::memset(blocks, 0, fixed - compact_blocks_offset);  // the codes are or'ed in
  compact_exception* end = exceptions;
  for (int64_t s = 0; s < n_steps; ++s) {
    uint8_t* block = blocks + static_cast<size_t>(s / 2) * compact_block_bytes;
    const int shift = s % 2 == 0 ? 0 : 4;
    uint8_t* lo = block + (s % 2) * step_values;
    uint8_t* codes = block + 2 * step_values;
    const uint16_t* values = plain + s * step_values;
    uint64_t escaped = 0;  // by position
    for (int pos = 0; pos < step_values; ++pos) {
      const uint16_t v = values[value_at[static_cast<size_t>(pos)]];
      const uint8_t code = code_of[v >> 8];
      const bool exception = code == 0 && (v >> 8) != 0;
      lo[pos] = exception ? uint8_t{0} : static_cast<uint8_t>(v & 0xff);
      codes[pos] = static_cast<uint8_t>(codes[pos] | (code << shift));
      escaped |= uint64_t{exception} << pos;
    }
    if (escaped != 0)
      end = list_exceptions(plain, s, escaped, end);
  }
#endif
  ACTORLLM_CHECK(end == exceptions + pc.exceptions,
                 "compact panels: a panel's exceptions are not the ones its coding counted");
  auto* tail = reinterpret_cast<uint8_t*>(end);
  std::memset(tail, 0, stride - static_cast<size_t>(tail - out));  // zeros to the stride
}

}  // namespace

int compact_position(int v) { return position_of[static_cast<size_t>(v)]; }

bool compact_panels_wanted() {
  const char* v = std::getenv("ACTORLLM_COMPACT_PANELS");
  if (v == nullptr || std::string_view(v) == "on")
    return have_compact_panel_kernels();
  if (std::string_view(v) == "off")
    return false;
  throw std::invalid_argument(std::string("ACTORLLM_COMPACT_PANELS: \"") + v +
                              "\" is not \"on\" or \"off\" (compact bf16 panels where the CPU reads them, or plain)");
}

int64_t compact_panel_exceptions(const uint32_t* plain, int64_t k_pad) {
  return code_for(reinterpret_cast<const uint16_t*>(plain), values_of(k_pad)).exceptions;
}

int64_t compact_panel_from_plain(const uint32_t* plain_pairs, int64_t k_pad, size_t stride, uint8_t* out) {
  ACTORLLM_CHECK(k_pad % 32 == 0, "compact panels: k_pad must be a multiple of 32");
  const auto* plain = reinterpret_cast<const uint16_t*>(plain_pairs);
  const compact_panel_coding coding = code_for(plain, values_of(k_pad));
  encode_panel(coding, plain, k_pad, stride, out);
  return coding.exceptions;
}

int64_t compact_exception_count(const uint8_t* panel) {
  uint64_t count = 0;
  std::memcpy(&count, panel + 24, sizeof count);
  return static_cast<int64_t>(count);
}

size_t compact_panel_stride(const void* compact) {
  uint64_t stride = 0;
  std::memcpy(&stride, static_cast<const uint8_t*>(compact) + 16, sizeof stride);
  return static_cast<size_t>(stride);
}

void expand_compact_panel_reference(const uint8_t* panel, int64_t k_pad, uint32_t* plain_pairs, bool with_exceptions) {
  auto* plain = reinterpret_cast<uint16_t*>(plain_pairs);
  const uint8_t* table = panel;
  const int64_t n_steps = steps_of(k_pad);
  for (int64_t s = 0; s < n_steps; ++s) {
    const uint8_t* block = panel + compact_blocks_offset + static_cast<size_t>(s / 2) * compact_block_bytes;
    const uint8_t* lo = block + (s % 2) * step_values;
    const uint8_t* codes = block + 2 * step_values;
    for (int pos = 0; pos < step_values; ++pos) {
      const int code = (codes[pos] >> (s % 2 == 0 ? 0 : 4)) & 0xf;
      plain[s * step_values + value_at[static_cast<size_t>(pos)]] = static_cast<uint16_t>(table[code] << 8 | lo[pos]);
    }
  }
  if (!with_exceptions)
    return;
  const compact_exception* exceptions = compact_exception_list(panel, k_pad);
  for (int64_t i = 0; i < compact_exception_count(panel); ++i) {
    plain[plain_panel_index(exceptions[i])] = exceptions[i].value;
  }
}

compact_panels_plan plan_compact_panels(std::span<const bf16_rows> parts, int64_t n_in, thread_pool& pool) {
  compact_panels_plan plan;
  plan.n_in = n_in;
  plan.k_pad = (n_in + 31) / 32 * 32;
  for (size_t i = 0; i < parts.size(); ++i) {
    ACTORLLM_CHECK(i + 1 == parts.size() || parts[i].n_rows % panel_rows == 0,
                   "compact panels: every part but the last must be whole panels of 32 rows");
    plan.n_rows += parts[i].n_rows;
    plan.n_panels += (parts[i].n_rows + panel_rows - 1) / panel_rows;
  }
  plan.codings.resize(static_cast<size_t>(plan.n_panels));
  const int64_t n_values = values_of(plan.k_pad);
  pool.parallel_for(plan.n_panels, [&](int64_t b, int64_t e) {
    for (int64_t g = b; g < e; ++g) {
      // The panel's high bytes where they lie, row by row (a panel holds a row's n_in values, whatever their order),
      // and the zeros its plain form pads with: rows past the part's last, inputs past n_in.
      const auto [part, p] = part_panel(parts, g);
      const int64_t rows = std::min(panel_rows, part.n_rows - p * panel_rows);
      byte_counts count{};
      count_high_bytes(part.w + p * panel_rows * n_in, rows * n_in, count);
      count[0] += n_values - rows * n_in;
      plan.codings[static_cast<size_t>(g)] = code_from_counts(count, n_values);
    }
  });
  int64_t most = 0;
  for (const compact_panel_coding& coding : plan.codings) {
    most = std::max(most, coding.exceptions);
    plan.exceptions += coding.exceptions;
  }
  plan.stride =
      compact_exceptions_offset(plan.k_pad) + (static_cast<size_t>(most) * sizeof(compact_exception) + 63) / 64 * 64;
  return plan;
}

void write_compact_panels(const compact_panels_plan& plan, std::span<const bf16_rows> parts, uint8_t* out,
                          thread_pool& pool) {
  ACTORLLM_CHECK(plan.codings.size() == static_cast<size_t>(plan.n_panels),
                 "compact panels: a plan without its panels' codings");
  pool.parallel_for(plan.n_panels, [&](int64_t b, int64_t e) {
    thread_local std::vector<uint16_t> plain;
    plain.resize(static_cast<size_t>(plan.k_pad * panel_rows));
    for (int64_t g = b; g < e; ++g) {
      const auto [part, p] = part_panel(parts, g);
      pack_one_bf16_panel(part.w, part.n_rows, plan.n_in, p, plain.data());
      encode_panel(plan.codings[static_cast<size_t>(g)], plain.data(), plan.k_pad, plan.stride,
                   out + static_cast<size_t>(g) * plan.stride);
    }
  });
}

}  // namespace actorllm::cpu
