// bf16 weights times activations rounded to bf16, on AVX512-BF16 dot products (vdpbf16ps): the CPU backend's fast
// path for bf16 models. Internal to kernels/cpu; callers go through kernels/cpu/matmul.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kernels/cpu/matmul.hpp"
#include "util/thread_pool.hpp"

namespace actorllm::cpu {

/// Whether this build has the vdpbf16ps kernels (compiled for a CPU with AVX512-BF16).
bool have_bf16_dot_kernels();

/// How the streamed decode kernels (1 to 4 tokens on packed panels) read on a CPU: the panel streams a thread reads
/// side by side at 1 or 2 tokens (2 at 3 or 4 tokens, where more would not fit the registers), and how many bytes
/// ahead of each step they ask for a stream's lines (the hardware prefetcher does the rest); the same two for compact
/// panels (compact_panels.hpp), whose streams apply at 1-4 tokens (a step is rebuilt one stream at a time, so only the
/// sums stay in registers) and whose prefetches go a whole number of 192-byte blocks ahead.
struct decode_read_pattern {
  int streams;
  int64_t prefetch_bytes;
  int compact_streams;
  int compact_prefetch_blocks;
  // How many blocks ahead of its step the first GEMM tile over a compact panel (5-48 tokens, and prefill without AMX)
  // asks for the panel: 4 (768 bytes, as the plain GEMM asks 1 KiB ahead); 48 (9,216 bytes) on Zen 5.
  int compact_gemm_prefetch_blocks;
  // Whether the compact decode kernels take one token's dot products on 256-bit vectors (the rebuild of each step stays
  // 512-bit): on Intel, where 512-bit floating-point instructions cost the core more than integer ones do.
  bool compact_narrow_dots = false;
  // How many bytes ahead along each row the one-token tiles of quantized weights (matmul_quantized: weight-only 4- and
  // 8-bit codes, W8A8) ask for their four row streams' lines; 0: none, the hardware prefetchers alone. On Intel (a
  // 2-vCPU Xeon with AMX, 2026-12-07) 1 KiB: the one-token tile's loads were where its samples sat, and
  // bench_cpu_decode --variants bf16,int4,int8 alternated put int4 at 1.87-1.95x bf16's batch 1 against 1.68-1.77x
  // without, int8 at 1.06-1.14x against 0.97-1.07x (256 to 2,048 bytes read alike in bench_quantized_matmul). On Zen 5
  // software prefetches on top of the hardware's measured 5-15% slower (bench_quantized_matmul, 2026-12-02): none.
  int64_t quantized_prefetch_bytes = 0;
};
/// The pattern measured fastest on CPUs of this vendor (CPUID's "GenuineIntel", "AuthenticAMD"; others get AMD's) and,
/// for compact panels on AMD, this family:
/// on Zen 4/5, four streams asking one step (128 bytes) ahead; on Intel (a Xeon with AMX, 2026-12-02) two streams
/// asking 1 KiB ahead, where four streams one step ahead read 70-84% of the probe against 83-95% (bench_kernels
/// --decode-step-rounds, alternated). Compact panels on Zen 4: two streams, the next block (two or four blocks ahead
/// read 2-4% and 16-18% slower, and two streams 4-14% faster than four in the VM's fast state, in a driver of the
/// decode's matmuls, 2026-12-04). On Intel (a 2-vCPU Xeon with AMX, 2026-12-04, bench_cpu_decode alternated): five
/// blocks (960 bytes) ahead, batch 1 1.11-1.13x and batch 2 1.20-1.26x the next block; two streams, as plain (four:
/// batch 2 1.03-1.09x, but batch 1 0.98-0.995x in 5 of 6 pairs of 64 steps). Eleven blocks (2,112 bytes) since
/// 2026-12-07: where memory gives no more than the decode takes (the 1.1B model from memory) it reads as five do
/// (bench_kernels 1.003x, 0.993x and 0.999x over three sessions; bench_cpu_decode alternated, batch 1 and 2 the same,
/// batch 4 1.03x), and where it gives more (a 114 MB model partly in this VM's L3) 1.13x at batch 1 (8 runs alternated,
/// 271-275 against 239-254 tokens/s): the longer distance keeps more lines in flight when each arrives sooner. A /tmp
/// copy of the kernel's loop over 96-128 MiB read 1.13x with eleven, 1.16x with sixteen; but from memory sixteen read
/// 0.95x. Exceptions: none in the steps since format 3 (compact_panels.hpp), added at each panel's end; against format
/// 2 (an escape map on Zen, every step looking at batch 1 on Intel) on the Xeon, bench_cpu_decode alternated, 10
/// pairs, 2026-12-05: batch 1 0.955-1.073x (median 1.016x), batch 2 1.025-1.074x, batch 32 0.995-1.079x.
/// Zen 5 (CPUID family 0x1A), on a 2-vCPU VM (2026-12-05, bench_kernels --compact-step-rounds, the step's matmuls on
/// compact panels read a step of each way in turn in one process, 8 rounds each): four compact streams ten blocks
/// (1,920 bytes) ahead, 1.29x, 1.26x, 1.14x and 1.29x the steps a second of Zen 4's two streams a block ahead (88-102%
/// of the probe against 74-79%); three streams ten blocks ahead measured the same (1.19x, 1.29x), four streams seven,
/// thirteen, sixteen and 24 blocks ahead 1.11-1.21x, five 1.15x, two streams 16 blocks ahead 1.17x. Its GEMM tiles
/// over compact panels (the same driver at 8, 16 and 32 token rows, 6 rounds each) 48 blocks ahead: at 8 tokens
/// 1.17x the steps a second of 10 blocks ahead (4 blocks 0.89x, 16 1.08-1.10x, 24-32 1.15x), at 16 tokens 1.17x (32-96
/// blocks 1.15-1.21x), at 32 tokens 1.14-1.15x (32-96 blocks 1.13-1.16x). At 3 and 4 tokens (2026-12-05, 8 rounds):
/// three compact streams 1.13-1.14x the steps a second of two, four 1.02-1.04x of three; the engine's batch 3 and 4
/// (bench_cpu_decode alternated, 6 pairs) 1.20x and 1.29x (medians) with four against two.
/// Narrow dots on Intel (a 2-vCPU Xeon with AMX, 2026-12-06): beside a chain of dependent multiplies, 512-bit vaddps or
/// vdpbf16ps slowed it 5.6% (3.36 against 3.56 GHz-equivalent), 256-bit vdpbf16ps and 512-bit vpermb, byte
/// interleaves and loads not at all. The compact step at one token with 256-bit dots: bench_kernels
/// --compact-step-rounds 8, 1.043x the steps a second (1.008-1.055; 96.6% of the probe against 93.0%);
/// bench_cpu_decode alternated, 6 pairs, batch 1 1.003-1.070x (median 1.047x). At two tokens 0.86x (vdpbf16ps issues
/// one every two cycles at either width there, so 256-bit dots take twice the port time): one token only.
decode_read_pattern decode_read_pattern_for(std::string_view vendor, int family = 0);
/// CPUID's family (base plus extended) of this CPU: 0x19 Zen 3/4, 0x1A Zen 5, 6 for most Intel cores; 0 where unknown.
int cpu_family();
inline constexpr int zen5_family = 0x1a;
/// The pattern the streamed decode kernels follow from now on: `pattern`, or this CPU's (decode_read_pattern_for of
/// cpu_vendor() and cpu_family()) for nullopt, as at start. For tests and benchmarks that run each way; never while a
/// matmul runs.
void set_decode_read_pattern(std::optional<decode_read_pattern> pattern);
/// The pattern the streamed decode kernels follow now (set_decode_read_pattern's, else this CPU's); in a build
/// without them, this CPU's. For the quantized weights' one-token tiles, which read their row streams by it.
decode_read_pattern decode_read_pattern_in_use();
/// This CPU's vendor string from CPUID leaf 0 (empty where there is none).
std::string cpu_vendor();

/// Runs `targets` (all bf16) over one input in one parallel region, each y = x w^T (+ bias) with x rounded to bf16
/// once. `gated`: exactly two targets (gate, up) of equal n_out; targets[0].y receives silu(gate) * up and
/// targets[1].y is scratch. Requires have_bf16_dot_kernels().
void matmul_bf16_dot(const float* x, int64_t n_tokens, int64_t n_in, std::span<const matmul_target> targets, bool gated,
                     thread_pool& pool, matmul_path path);

// The pieces of the panel algorithm that the quantized weights' GEMM (matmul_quantized) runs on rows it dequantized
// to bf16. Require have_bf16_dot_kernels().

/// Rounds token rows x [n_tokens][n_in] to bf16 into xb [n_tokens][ld], zero from n_in to k_pad (k_pad a multiple of
/// 32, ld >= k_pad).
void round_rows_to_bf16(const float* x, int64_t n_tokens, int64_t n_in, uint16_t* xb, int64_t k_pad, int64_t ld);
/// Packs rows [o0, o0 + 32) x inputs [0, k_pad) of the row-major bf16 w [n_out, n_in] into one panel of
/// tensor_layout::cpu_bf16_panels ([k_pad / 2][32] pairs); rows past n_out and inputs past n_in become zeros.
void pack_bf16_panel(const uint16_t* w, int64_t n_in, int64_t n_out, int64_t o0, int64_t k_pad, uint32_t* panel);
/// The token rows bf16_panel_product reads for n_tokens: more than n_tokens (up to a multiple of 16) where it runs on
/// AMX tiles. The caller's xb holds that many rows (those past n_tokens only make sums that are not written).
int64_t bf16_panel_rows(int64_t n_tokens);
/// y[t, j] = sum_k xb[t, k] * panel[k, j] (+ bias32[j]) for t < n_tokens, j < n_valid (<= 32): the 12 x 32 register
/// tiles over one panel that sits in cache, or AMX tiles where matmul_bf16_dot's GEMMs use them (the same sums as
/// those). xb rows ld apart (bf16_panel_rows of them), y rows ldy apart; bias32 null or 32 values.
void bf16_panel_product(const uint16_t* xb, int64_t ld, int64_t n_tokens, const uint32_t* panel, int64_t k_pad,
                        float* y, int64_t ldy, int n_valid, const float* bias32);

}  // namespace actorllm::cpu
