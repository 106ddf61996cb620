// bf16 panels in 12 bits a weight: the form the CPU backend packs bf16 Linear weights into where its kernels read it
// (tensor_layout::cpu_bf16_compact_panels), so that a memory-bound decode reads a quarter fewer bytes.
//
// A bf16 value is a sign, 8 exponent bits and 7 mantissa bits; its low byte is the exponent's last bit and the
// mantissa, its high byte the sign and the exponent's first 7 bits. Trained weights use few high bytes: in one panel
// (32 rows) the 15 most frequent cover all but ~1e-4 of the weights (TinyLlama-shape weights 1.4e-4, stories260K
// 4.8e-4). So each panel keeps its weights' low bytes as they are, and each high byte as a 4-bit code into a table of
// 16: code 0 is high byte 0x00 (zero and values below 2^-125), codes 1-15 the panel's 15 most frequent other ones. A
// value whose high byte has no code is an exception: its code is 0 and its low byte 0 (so the step holds +0 there),
// and its whole value goes to the panel's list of exceptions. The kernels rebuild each step's 64 bf16 values with a
// table lookup and two byte interleaves and nothing else (matmul_bf16.cpp); at the end of a panel they add each
// exception's product to its output (add_compact_exceptions). A sum so differs from the plain panels' by the rounding
// of where its exceptions are added, and is the same for every token count and thread split; the AMX GEMMs get every
// bit of the plain panel back (expanded for prefill, expand_compact_panel; rebuilt into L1 a step or a K block at a
// time for batched decode, compact_pair_rows).
//
// Until format 3 the list held only the exceptions' high bytes and every step looked for them (a compare, an expand
// and a count that chained each step's exceptions to the last; or an escape map of the steps that have any, whose
// loop exits mispredicted): at batch 1 on a Xeon the decode without those lookups (timing only) read 1.04x (0.99-1.11x)
// faster, and format 3 against format 2 there: batch 1 1.016x (median of 10 pairs, 0.955-1.073x), batch 2 1.025-1.074x.
//
// One panel, `stride` bytes (the same for every panel of a weight, so that panel p starts at p * stride):
// - a 64-byte header: the 16-entry table (code -> high byte; entry 0 is 0x00), the stride (u64 at byte 16) and the
//   panel's exception count (u64 at byte 24), zeros to byte 64;
// - k_pad / 64 blocks of 192 bytes, each two steps of the plain panel ([k_pad / 2][32] pairs: a step is 64 bf16
//   values, 32 outputs x 2 inputs): the low bytes of step 2b (64), those of step 2b + 1 (64), then 64 code bytes, the
//   low nibble step 2b's code and the high nibble step 2b + 1's. Value v of a step (v = 2 x output + input parity,
//   the plain panel's order) sits at byte compact_position(v) of its low bytes and of its codes: the order in which
//   AVX-512's byte interleaves (vpunpcklbw/vpunpckhbw, per 128-bit lane) give the 64 values back as two vectors;
// - the exceptions: compact_exception records (8 bytes), by input and then output; then zeros to the stride.
//
// The stride is 64 + 96 x k_pad / 2 bytes, plus 8 bytes for each exception of the panel that has most, rounded up to
// 64: 75% of the plain panels' bytes and a little more.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace actorllm {
class thread_pool;
}

namespace actorllm::cpu {

/// Whether this build reads compact panels (AVX512-VBMI byte lookups and AVX512-BF16 dot products: a native build on
/// Zen 4 or Intel since Ice Lake / Sapphire Rapids).
bool have_compact_panel_kernels();

/// Whether the CPU backend packs bf16 weights as compact panels: where have_compact_panel_kernels(), unless
/// ACTORLLM_COMPACT_PANELS is "off" (plain panels, for comparisons); "on" or unset: where the kernels exist. Throws
/// std::invalid_argument naming the variable for another value.
bool compact_panels_wanted();

/// The version of the compact panels' byte layout (packed weights cached on disk carry it).
inline constexpr uint32_t compact_panels_format = 3;  // 3: exceptions as whole values, added at a panel's end

/// The byte of a compact step that holds value v (0-63) of the plain panel's step.
int compact_position(int v);

/// Header fields of a compact panel.
inline constexpr size_t compact_header_bytes = 64;
inline constexpr size_t compact_block_bytes = 192;  // two steps
/// Where a compact panel's blocks start: after its header.
inline constexpr size_t compact_blocks_offset = compact_header_bytes;
/// Where a compact panel's exceptions start: after its k_pad / 4 blocks.
inline constexpr size_t compact_exceptions_offset(int64_t k_pad) {
  return compact_blocks_offset + static_cast<size_t>(k_pad / 4) * compact_block_bytes;
}

/// One value a compact panel's codes do not hold: weight row `output` (0-31) of the panel at input `k`, bf16 `value`.
struct compact_exception {
  uint32_t k;
  uint16_t output;
  uint16_t value;
};
static_assert(sizeof(compact_exception) == 8);
/// Where an exception's value sits among the plain panel's bf16 values ([k_pad / 2][32] pairs).
inline constexpr int64_t plain_panel_index(const compact_exception& e) {
  return int64_t{e.k / 2} * 64 + 2 * int64_t{e.output} + e.k % 2;
}

/// How many exceptions a compact panel holds (its header says).
int64_t compact_exception_count(const uint8_t* panel);
/// A compact panel's exceptions, by input and then output.
inline const compact_exception* compact_exception_list(const uint8_t* panel, int64_t k_pad) {
  return reinterpret_cast<const compact_exception*>(panel + compact_exceptions_offset(k_pad));
}

/// One row-major bf16 block of a stacked weight: rows [n_rows, n_in].
struct bf16_rows {
  const uint16_t* w;
  int64_t n_rows;
};

/// One panel's coding: high byte 0x00 is code 0; its 15 most frequent other high bytes (ties to the smaller byte) get
/// codes 1-15 in that order.
struct compact_panel_coding {
  std::array<uint8_t, 16> table{};  ///< code -> high byte; entry 0 is 0x00
  int codes = 0;                    ///< codes in use, 1 to `codes` (fewer than 15 where the panel has fewer bytes)
  int64_t exceptions = 0;           ///< the panel's values whose high byte has no code
};

/// The compact form of a stacked weight (parts one above the other; every part but the last whole panels of 32 rows).
struct compact_panels_plan {
  int64_t n_in = 0;
  int64_t n_rows = 0;
  int64_t n_panels = 0;
  int64_t k_pad = 0;       // n_in rounded up to 32
  size_t stride = 0;       // bytes of each panel
  int64_t exceptions = 0;  // high bytes kept as exceptions, all panels
  /// How each panel codes its high bytes, as the plan chose: the write encodes with it instead of counting each
  /// panel's high bytes again.
  std::vector<compact_panel_coding> codings;
  size_t bytes() const { return static_cast<size_t>(n_panels) * stride; }
};

/// Reads the parts once (each panel's high bytes, counted row by row where they lie) and says how large their compact
/// form is and how each panel codes its high bytes.
compact_panels_plan plan_compact_panels(std::span<const bf16_rows> parts, int64_t n_in, thread_pool& pool);
/// Writes the parts' compact form into `out` (plan.bytes(), 64-byte aligned), in parallel over the panels.
void write_compact_panels(const compact_panels_plan& plan, std::span<const bf16_rows> parts, uint8_t* out,
                          thread_pool& pool);

/// Bytes per panel of a compact weight (from its first panel's header).
size_t compact_panel_stride(const void* compact);
/// Where panel `p` of a compact weight starts.
inline const uint8_t* compact_panel(const void* compact, int64_t p) {
  return static_cast<const uint8_t*>(compact) + static_cast<size_t>(p) * compact_panel_stride(compact);
}

/// The plain panel ([k_pad / 2][32] bf16 pairs, tensor_layout::cpu_bf16_panels) of one compact panel, one value at a
/// time: the reference the vector kernels are tested against. Without `with_exceptions`, the panel the kernels' steps
/// hold: +0 where an exception is.
void expand_compact_panel_reference(const uint8_t* panel, int64_t k_pad, uint32_t* plain, bool with_exceptions = true);
/// The same with the vector kernels where the build has them (else the reference): how the AMX GEMMs of prefill read a
/// panel.
void expand_compact_panel(const uint8_t* panel, int64_t k_pad, uint32_t* plain);

/// The compact form of one plain panel ([k_pad / 2][32] pairs) into `out` (`stride` bytes, of which the header says
/// so); the panel's exception count. A panel with more exceptions than the stride holds is refused (std::logic_error).
int64_t compact_panel_from_plain(const uint32_t* plain, int64_t k_pad, size_t stride, uint8_t* out);
/// The exceptions one plain panel would have.
int64_t compact_panel_exceptions(const uint32_t* plain, int64_t k_pad);

}  // namespace actorllm::cpu
