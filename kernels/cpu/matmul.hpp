// Dense matrix multiplication against Hugging Face Linear weights: the CPU backend's GEMV (decode) and GEMM
// (prefill) in one entry point.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "kernels/dtype.hpp"
#include "util/thread_pool.hpp"

namespace actorllm::cpu {

/// Algorithm choice of matmul. `automatic` picks by n_tokens; the others exist so that tests and benchmarks can
/// drive each path on any shape.
enum class matmul_path : uint8_t {
  automatic,
  gemv,  // streams each weight row once for all tokens (bandwidth bound: decode, small batches)
  gemm,  // packs weight panels and reuses them from cache across token rows (compute bound: prefill)
};

/// Below this many tokens `automatic` uses the GEMV path (below it, packing weight panels costs more than the better
/// register reuse saves). The measured crossover on an AVX-512 Xeon lies between 64 and 128 tokens; with AVX2 (16
/// registers: the GEMV's tile holds two tokens) the GEMM wins from 8 on the 2-vCPU Zen 3 VM (2048 -> 8192 bf16,
/// 2026-12-02: 8 tokens 5.6 against 6.1 ms, 16 7.9 against 11.1, 32 11.3 against 20.1; 4 tokens 5.2 against 4.0).
#if defined(__AVX2__) && !defined(__AVX512F__)
inline constexpr int64_t matmul_gemm_min_tokens = 8;
/// The same for bf16 weights packed at load (tensor_layout::cpu_bf16_panels) on AVX2, where the GEMM packs nothing
/// (an AVX2 build on a 2-vCPU Zen 4 VM, 2048 -> 8192, 2026-12-03: 2 tokens GEMV 1.23 ms against GEMM 1.67, 3 tokens
/// 1.97 against 1.77, 4 tokens 2.16 against 1.83).
inline constexpr int64_t packed_gemm_min_tokens = 3;
#else
inline constexpr int64_t matmul_gemm_min_tokens = 96;
#endif

/// The kernels bf16 weights run on. `best`: vdpbf16ps where this build and CPU have AVX512-BF16, and AMX tiles for
/// the GEMMs (5 tokens and more) where the process may use them (amx_bf16_usable); `dot`: vdpbf16ps only; else `fma`:
/// the f32-FMA kernels of every other weight type (same products, x rounded to bf16 first). Process-wide; for tests
/// and benchmarks that compare them on one machine.
enum class bf16_kernels : uint8_t { best, dot, fma };
void set_bf16_kernels(bf16_kernels k);
bf16_kernels get_bf16_kernels();

/// One weight of a group that shares an input: y = x w^T (+ bias). w: [n_out, n_in] of type wtype; bias: f32 [n_out]
/// or null; y: f32 [n_tokens, n_out].
struct matmul_target {
  const void* w = nullptr;
  dtype wtype = dtype::f32;
  int64_t n_out = 0;
  const float* bias = nullptr;
  float* y = nullptr;
  /// w is in tensor_layout::cpu_bf16_panels (pack_bf16_panels), not row-major; bf16 only, where
  /// bf16_panels_preferred() can be true.
  bool packed = false;
  /// Keeps w's memory alive, or null. When every target of a decode call over packed weights has one, a thread the
  /// OS took off its core does not hold the call up: another computes its part again, and the descheduled thread may
  /// still be reading w after the call returned (thread_pool::parallel_for_takeover). Without, the call waits for
  /// every thread, and w need only live as long as the call.
  std::shared_ptr<const void> owner = nullptr;
  /// w (packed) is in tensor_layout::cpu_bf16_compact_panels (compact_panels.hpp), where have_compact_panel_kernels().
  bool compact = false;
};

/// The version of tensor_layout::cpu_bf16_panels' byte layout: changed whenever pack_bf16_panels writes other bytes
/// for the same weight, so that packed weights cached on disk (cpu::packed_weight_cache) in another layout are not
/// used.
inline constexpr uint32_t bf16_panels_format = 1;
/// Bytes of a [n_out, n_in] bf16 weight in tensor_layout::cpu_bf16_panels.
size_t bf16_panels_bytes(int64_t n_out, int64_t n_in);
/// Writes w (bf16 [n_out, n_in], row-major) into `out` (bf16_panels_bytes) in tensor_layout::cpu_bf16_panels.
void pack_bf16_panels(const uint16_t* w, int64_t n_out, int64_t n_in, uint16_t* out, thread_pool& pool);
/// Writes panel p (rows [32 p, 32 p + 32)) of w (bf16 [n_out, n_in], row-major) into `panel` (bf16_panels_bytes(32,
/// n_in) bytes), as pack_bf16_panels does.
void pack_one_bf16_panel(const uint16_t* w, int64_t n_out, int64_t n_in, int64_t p, uint16_t* panel);
/// Whether bf16 Linear weights are worth packing here: this build and CPU run the vdpbf16ps kernels, or this is an AVX2
/// build (no AVX-512), and set_bf16_kernels has not asked for the FMA ones. Packed weights run on vdpbf16ps where
/// the CPU has it, else on the AVX2 FMA kernels (matmul.cpp: x rounded to bf16, the products summed in f32).
bool bf16_panels_preferred();

/// y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]) for t < n_tokens, o < n_out. x: [n_tokens, n_in] f32 row-major;
/// w: [n_out, n_in] row-major (the Hugging Face Linear layout) of type `wtype` (f32, f16 or bf16); bias: f32
/// [n_out] or null; y: [n_tokens, n_out] f32, must not overlap x. Parallel over the pool (split over n_out).
/// Accumulates in f32. A bf16 weight multiplies the input rounded to bf16 (round-to-nearest-even), as a bf16 model
/// does in transformers and in the CUDA backend; the products are exact and summed in f32. On CPUs with AVX512-BF16
/// that is one vdpbf16ps per 32 weights.
void matmul(const float* x, int64_t n_tokens, int64_t n_in, const void* w, dtype wtype, int64_t n_out,
            const float* bias, float* y, thread_pool& pool);

/// As above with an explicit algorithm.
void matmul(const float* x, int64_t n_tokens, int64_t n_in, const void* w, dtype wtype, int64_t n_out,
            const float* bias, float* y, thread_pool& pool, matmul_path path);

/// matmul for every target over the same input (q/k/v), in one parallel region: all of them where the weights are
/// bf16 and the CPU has AVX512-BF16 kernels, else those of each weight type together on the f32-FMA kernels (bf16's
/// input rounded once for all); packed and row-major weights mixed run one matmul per target. Each output is the same
/// sum as its target's matmul alone. Up to 8 targets.
void matmul_group(const float* x, int64_t n_tokens, int64_t n_in, std::span<const matmul_target> targets,
                  thread_pool& pool, matmul_path path = matmul_path::automatic);

/// The SwiGLU up-projection: out = silu(x w_gate^T) * (x w_up^T), both weights [n_ff, n_in] of type wtype (both packed
/// or neither; `compact`: packed as compact panels). up_scratch:
/// f32 [n_tokens, n_ff], overwritten; out: f32 [n_tokens, n_ff], apart from x and up_scratch. With bf16 weights on an
/// AVX512-BF16 CPU gate and up rows are read side by side in one parallel region. gate_owner and up_owner keep the
/// weights alive, as matmul_target::owner does.
void matmul_silu_gate(const float* x, int64_t n_tokens, int64_t n_in, const void* w_gate, const void* w_up, dtype wtype,
                      bool packed, bool compact, int64_t n_ff, float* up_scratch, float* out, thread_pool& pool,
                      matmul_path path = matmul_path::automatic, std::shared_ptr<const void> gate_owner = {},
                      std::shared_ptr<const void> up_owner = {});

}  // namespace actorllm::cpu
