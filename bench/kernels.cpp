// CPU kernel benchmark: the machine's streaming memory bandwidth (the decode roofline), the vdpbf16ps rate with
// operands in registers and in the GEMM's register tile (its compute ceiling), matmul weight bandwidth in the decode
// shapes of Llama-3.2-1B, GEMM throughput at prefill size, the GEMV/GEMM crossover, and the matmuls of one whole
// batch-1 decode step of the TinyLlama-1.1B shape on packed weights, as the CPU backend runs them, against the
// roofline. Prints a table; writes JSON (--json PATH). --decode-step-rounds N: only the probe and that step,
// alternately, beside the same bytes read as one call, as calls of 2, 8 and 32 MiB (each call's fixed cost, in us),
// the step with the caller busy between its calls (--decode-step-gaps), and the step with gate/up and down as one
// call: what the step's call structure costs, apart from the rest of a decode step. --compact-step-rounds N: the
// same step's matmuls on trained-like weights as compact panels (compact_panels.hpp) and as plain panels of the same
// values, alternated in one process in a rotating order, against the probe.
//
// Weights live in one 1 GiB arena that is larger than the last-level cache, and successive calls walk through it,
// so the decode figures are memory-bound numbers, not cache-resident ones.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

// simd.hpp first: it includes <immintrin.h> with GCC 12's false -Wuninitialized silenced, which then also covers
// the intrinsics memory_bandwidth.hpp uses.
#include "kernels/cpu/simd.hpp"

#include "bench/bench_support.hpp"
#include "bench/memory_bandwidth.hpp"
#include "kernels/cpu/amx_bf16.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/compact_panels.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "util/json_writer.hpp"
#include "util/thread_pool.hpp"

namespace {

using namespace actorllm;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// The weight arena: 1 GiB of 16-bit patterns in [0x3c00, 0x3f80) so that every reading (bf16, f16, or f32 pairs)
// is a normal number of modest size (no denormal slow paths, no overflow). On huge pages, as the loaded weights are.
struct arena {
  size_t bytes;
  std::shared_ptr<host_buffer> buf;
  uint8_t* data;

  arena(size_t n, thread_pool& pool)
      : bytes(n), buf(host_buffer::allocate_huge(n)), data(static_cast<uint8_t*>(buf->data())) {
    auto* p = reinterpret_cast<uint16_t*>(data);
    int64_t n16 = static_cast<int64_t>(n / 2);
    // First touch from the pool's threads, like the weights a loader would place.
    pool.parallel_for(n16, [&](int64_t b, int64_t e) {
      uint64_t s = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(b + 1);
      for (int64_t i = b; i < e; ++i) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        p[i] = static_cast<uint16_t>(0x3c00 + (s % 0x380));
      }
    });
  }
  // Successive matrices of `size` bytes, wrapping before the end.
  const void* slot(size_t index, size_t size) const {
    size_t span = bytes - size;
    size_t off = span == 0 ? 0 : (index * size) % span;
    off &= ~size_t{4095};
    return data + off;
  }
};

// Round trip of an empty parallel_for (dispatch, every thread runs a chunk, join): microseconds, median of
// batches.
double measure_dispatch_us(thread_pool& pool, int calls) {
  std::vector<double> per_call;
  std::atomic<int64_t> sink{0};
  for (int batch = 0; batch < 10; ++batch) {
    auto t0 = clock_type::now();
    for (int c = 0; c < calls / 10; ++c)
      pool.parallel_for(pool.size(), [&](int64_t b, int64_t e) { sink.fetch_add(e - b, std::memory_order_relaxed); });
    per_call.push_back(seconds_since(t0) / (calls / 10) * 1e6);
  }
  return bench::median(per_call);
}

struct matmul_result {
  std::string name;
  std::string dtype;
  int64_t n_tokens, n_in, n_out;
  std::string path;
  std::string kernels;  // bf16 weights: "dot" (vdpbf16ps) or "fma"; "-" for the other types
  double seconds;       // median per call
  double weight_gbs;
  double gflops;
};

// Which kernels a bf16 matmul ran on: "-" for other types, "pack"/"amx" on packed panels (vdpbf16ps or AMX tiles),
// "dot"/"amx"/"fma" on row-major weights (AMX for the panel algorithm: the gemm path, which `automatic` takes from
// 384 tokens with vdpbf16ps).
const char* kernels_label(dtype wt, int64_t n_tokens, cpu::bf16_kernels kernels, bool packed, cpu::matmul_path path) {
  if (wt != dtype::bf16)
    return "-";
  const bool dot = kernels != cpu::bf16_kernels::fma && cpu::have_bf16_dot_kernels();
  const bool amx = kernels == cpu::bf16_kernels::best && cpu::amx_bf16_usable() && n_tokens > 4;
  if (packed)
    return amx ? "amx" : "pack";
  const bool panels = path == cpu::matmul_path::gemm || (path == cpu::matmul_path::automatic && n_tokens >= 384);
  return amx && panels ? "amx" : dot ? "dot" : "fma";
}

matmul_result time_matmul(const arena& a, thread_pool& pool, dtype wt, int64_t n_tokens, int64_t n_in, int64_t n_out,
                          cpu::matmul_path path, double min_seconds, int min_reps, const std::string& name,
                          cpu::bf16_kernels kernels = cpu::bf16_kernels::best, bool packed = false) {
  cpu::set_bf16_kernels(kernels);
  // A packed weight is read in place, so an arena slot of random bf16 serves as one (the values do not matter).
  size_t wbytes = packed ? cpu::bf16_panels_bytes(n_out, n_in) : static_cast<size_t>(n_in * n_out) * dtype_size(wt);
  std::vector<float> x(static_cast<size_t>(n_tokens * n_in)), y(static_cast<size_t>(n_tokens * n_out));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
  std::vector<double> times;
  size_t slot = 0;
  auto run = [&] {
    const cpu::matmul_target target{a.slot(slot++, wbytes), wt, n_out, nullptr, y.data(), packed};
    cpu::matmul_group(x.data(), n_tokens, n_in, std::span{&target, 1}, pool, path);
  };
  run();  // warm
  auto start = clock_type::now();
  while (static_cast<int>(times.size()) < min_reps || seconds_since(start) < min_seconds) {
    auto t0 = clock_type::now();
    run();
    times.push_back(seconds_since(t0));
  }
  double s = bench::median(times);
  const char* path_name = path == cpu::matmul_path::gemv   ? "gemv"
                          : path == cpu::matmul_path::gemm ? "gemm"
                                                           : (n_tokens < cpu::matmul_gemm_min_tokens ? "gemv" : "gemm");
  return {name,
          std::string(dtype_name(wt)),
          n_tokens,
          n_in,
          n_out,
          path_name,
          kernels_label(wt, n_tokens, kernels, packed, path),
          s,
          static_cast<double>(wbytes) / s / 1e9,
          2.0 * static_cast<double>(n_tokens * n_in * n_out) / s / 1e9};
}

// The matmuls of one batch-1 decode step of the TinyLlama-1.1B shape (22 layers; q/k/v and gate/up stacked as the
// model loads them; an untied 32000-row lm_head) on packed weights with owners, as the CPU backend runs them: the
// takeover path of a real decode step without the rest of the layer. Timed per kind of matmul too, so a step's
// shortfall against the roofline can be put on the shapes (small matrices pay the start and the end of a parallel
// region more often).
struct decode_step_result {
  struct kind {
    std::string name;
    double bytes = 0;    // per step
    double seconds = 0;  // per step (median over the steps)
  };
  double seconds = 0;
  double weight_bytes = 0;
  double gbs = 0;
  std::vector<kind> kinds;
};

// Busy for `us` microseconds on the calling thread: the work between a layer's calls, as a decode step keeps the
// caller.
void busy_for(double us) {
  const auto until = clock_type::now() + std::chrono::duration<double, std::micro>(us);
  while (us > 0 && clock_type::now() < until) {
  }
}

// The step's matmuls; with `gaps` (microseconds before a layer's q/k/v, o, gate/up and down calls) the caller is busy
// that long before each, as the rest of the layer (norms, rope, the cache write, attention) keeps it in a real step.
// With `fused_mlp` gate/up and down are one call over their bytes together (11264 + 5632 rows of 2048 inputs): what
// fusing them (down computed over blocks of its inputs as gate/up's outputs come) could save at most, a call and its
// last grain a layer.
decode_step_result time_decode_step(const arena& a, thread_pool& pool, int reps, const std::array<double, 4>& gaps = {},
                                    bool fused_mlp = false) {
  enum kind_index { qkv, o, gate_up, down, lm_head, n_kinds };
  struct shape {
    kind_index kind;
    int64_t n_in, n_out;
  };
  const char* names[n_kinds] = {"qkv 2048->2560", "o 2048->2048", "gate/up 2048->11264", "down 5632->2048",
                                "lm_head 2048->32000"};
  std::vector<shape> shapes;
  for (int l = 0; l < 22; ++l)
    if (fused_mlp)
      shapes.insert(shapes.end(), {{qkv, 2048, 2560}, {o, 2048, 2048}, {gate_up, 2048, 11264 + 5632}});
    else
      shapes.insert(shapes.end(), {{qkv, 2048, 2560}, {o, 2048, 2048}, {gate_up, 2048, 11264}, {down, 5632, 2048}});
  shapes.push_back({lm_head, 2048, 32000});
  std::vector<float> x(5632, 0.01f), y(32000);
  const std::shared_ptr<const void> owner = a.buf;
  decode_step_result r;
  r.kinds.resize(n_kinds);
  for (int k = 0; k < n_kinds; ++k)
    r.kinds[static_cast<size_t>(k)].name = names[k];
  // Packed panels where the CPU backend packs bf16 weights at load (vdpbf16ps, or an AVX2 build), else row-major bf16.
  const bool packed = cpu::bf16_panels_preferred();
  auto weight_bytes = [&](int64_t n_out, int64_t n_in) {
    return packed ? cpu::bf16_panels_bytes(n_out, n_in) : static_cast<size_t>(n_out * n_in) * sizeof(uint16_t);
  };
  for (auto s : shapes) {
    const auto b = static_cast<double>(weight_bytes(s.n_out, s.n_in));
    r.weight_bytes += b;
    r.kinds[static_cast<size_t>(s.kind)].bytes += b;
  }
  size_t slot_index = 0;
  std::vector<std::vector<double>> kind_times(n_kinds);
  std::vector<double> step_times;
  auto run_step = [&](bool timed) {
    std::array<double, n_kinds> per_kind{};
    const auto t_step = clock_type::now();
    for (auto s : shapes) {
      const size_t b = weight_bytes(s.n_out, s.n_in);
      if (s.kind != lm_head)
        busy_for(gaps[static_cast<size_t>(s.kind)]);
      const auto t0 = clock_type::now();
      const cpu::matmul_target target{a.slot(slot_index++, b), dtype::bf16, s.n_out, nullptr, y.data(), packed, owner};
      cpu::matmul_group(x.data(), 1, s.n_in, std::span{&target, 1}, pool);
      per_kind[static_cast<size_t>(s.kind)] += seconds_since(t0);
    }
    if (!timed)
      return;
    step_times.push_back(seconds_since(t_step));
    for (int k = 0; k < n_kinds; ++k)
      kind_times[static_cast<size_t>(k)].push_back(per_kind[static_cast<size_t>(k)]);
  };
  run_step(false);
  for (int i = 0; i < reps; ++i)
    run_step(true);
  r.seconds = bench::median(step_times);
  r.gbs = r.weight_bytes / r.seconds / 1e9;
  for (int k = 0; k < n_kinds; ++k)
    r.kinds[static_cast<size_t>(k)].seconds = bench::median(kind_times[static_cast<size_t>(k)]);
  return r;
}

// The arena read by batch-1 calls of `call_bytes` each (2048 inputs, as many packed rows as fit; the whole arena: one
// call, the kernel with no call boundary), back to back as a step makes its calls.
struct calls_result {
  int64_t calls = 0;   // per pass over the arena
  double bytes = 0;    // per pass
  double seconds = 0;  // per pass (median)
  double gbs() const { return bytes / seconds / 1e9; }
};

calls_result time_calls(const arena& a, thread_pool& pool, int reps, size_t call_bytes) {
  const int64_t n_in = 2048, panel = static_cast<int64_t>(cpu::bf16_panels_bytes(32, n_in));
  const int64_t n_out = static_cast<int64_t>(std::min(call_bytes, a.bytes)) / panel * 32;
  const auto stride = static_cast<int64_t>(cpu::bf16_panels_bytes(n_out, n_in));
  calls_result r;
  r.calls = static_cast<int64_t>(a.bytes) / stride;
  r.bytes = static_cast<double>(r.calls * stride);
  std::vector<float> x(static_cast<size_t>(n_in), 0.01f), y(static_cast<size_t>(n_out));
  std::vector<double> times;
  for (int i = 0; i <= reps; ++i) {  // the first pass untimed
    const auto t0 = clock_type::now();
    for (int64_t c = 0; c < r.calls; ++c) {
      // Row-major where the CPU backend would not pack: n_out is a multiple of 32 and n_in of 32, so the bytes are
      // the same.
      const cpu::matmul_target target{a.data + c * stride,          dtype::bf16, n_out, nullptr, y.data(),
                                      cpu::bf16_panels_preferred(), a.buf};
      cpu::matmul_group(x.data(), 1, n_in, std::span{&target, 1}, pool);
    }
    if (i > 0)
      times.push_back(seconds_since(t0));
  }
  r.seconds = bench::median(times);
  return r;
}

// time_calls for each of `sizes`, in turn `cycles` times (so that the machine's drift hits each alike); each with the
// median of its cycles' seconds.
std::vector<calls_result> time_calls_alternately(const arena& a, thread_pool& pool, int reps,
                                                 std::span<const size_t> sizes, int cycles) {
  std::vector<calls_result> out(sizes.size());
  std::vector<std::vector<double>> seconds(sizes.size());
  for (int cycle = 0; cycle < cycles; ++cycle)
    for (size_t i = 0; i < sizes.size(); ++i) {
      out[i] = time_calls(a, pool, reps, sizes[i]);
      seconds[i].push_back(out[i].seconds);
    }
  for (size_t i = 0; i < sizes.size(); ++i)
    out[i].seconds = bench::median(seconds[i]);
  return out;
}

// --decode-step-gaps: four microsecond counts, comma separated; throws CLI::ValidationError naming what is wrong.
std::array<double, 4> parse_gaps(const std::string& text) {
  std::array<double, 4> gaps{};
  size_t n = 0, at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    if (n == gaps.size())
      throw CLI::ValidationError("--decode-step-gaps", fmt::format("four values expected, got more: '{}'", text));
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !(v >= 0 && v <= 10000))
      throw CLI::ValidationError("--decode-step-gaps",
                                 fmt::format("'{}' is not a number of microseconds in [0, 10000]", item));
    gaps[n++] = v;
    at = comma + 1;
  }
  if (n != gaps.size())
    throw CLI::ValidationError("--decode-step-gaps",
                               fmt::format("four values expected (q/k/v, o, gate/up, down), got {}", n));
  return gaps;
}

// Paged attention of `n_seqs` sequences, each with `n_query` query rows ending at context `ctx` (prefill: one
// sequence, n_query == ctx; decode: many sequences, one row each), TinyLlama's heads (32 query, 4 kv, 64 wide),
// blocks of 16. Returns the median seconds per call and the FLOPs of QK^T and PV over the causal pairs. `cold`: 64 MiB
// are read before each call (not timed), so the cache rows come from memory, as in a decode step, where the layer's
// weights streamed through the caches since the layer before read its rows.
struct attention_result {
  std::string name;
  double seconds;
  double gflops;
};

attention_result time_attention(thread_pool& pool, const std::string& name, int64_t n_seqs, int64_t n_query,
                                int64_t ctx, double min_seconds, dtype cache_type = dtype::f32, bool cold = false) {
  const int64_t n_head = 32, n_kv = 4, hd = 64, bs = 16;
  const int64_t blocks_per_seq = (ctx + bs - 1) / bs;
  const int64_t n_blocks = n_seqs * blocks_per_seq;
  std::vector<float> k(static_cast<size_t>(n_blocks * bs * n_kv * hd)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
    v[i] = static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f;
  }
  const int64_t n_tokens = n_seqs * n_query;
  std::vector<float> q(static_cast<size_t>(n_tokens * n_head * hd), 0.01f), out(q.size());
  std::vector<int32_t> positions(static_cast<size_t>(n_tokens)), table(static_cast<size_t>(n_blocks));
  std::vector<cpu::attention_seq> seqs;
  double pairs = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b)
      table[static_cast<size_t>(s * blocks_per_seq + b)] = static_cast<int32_t>(s * blocks_per_seq + b);
    for (int64_t r = 0; r < n_query; ++r) {
      positions[static_cast<size_t>(s * n_query + r)] = static_cast<int32_t>(ctx - n_query + r);
      pairs += static_cast<double>(ctx - n_query + r + 1);
    }
    seqs.push_back({static_cast<int32_t>(s * n_query), static_cast<int32_t>(n_query), table.data() + s * blocks_per_seq,
                    static_cast<int32_t>(blocks_per_seq)});
  }
  // A bf16 cache (what serving a bf16 model keeps) holds the same values rounded.
  std::vector<uint16_t> k16, v16;
  // Laid out as the CPU backend allocates a cache (kv heads outer).
  cpu::paged_kv_view cache{k.data(), v.data(), n_blocks, bs, n_kv, hd, dtype::f32, true};
  if (cache_type == dtype::bf16) {
    k16.resize(k.size());
    v16.resize(v.size());
    cpu::convert_from_f32(k.data(), static_cast<int64_t>(k.size()), dtype::bf16, k16.data());
    cpu::convert_from_f32(v.data(), static_cast<int64_t>(v.size()), dtype::bf16, v16.data());
    cache = cpu::paged_kv_view{k16.data(), v16.data(), n_blocks, bs, n_kv, hd, dtype::bf16, true};
  }
  std::vector<float> evict(cold ? (size_t{64} << 20) / sizeof(float) : 0, 1.0f);
  float evict_sum = 0.0f;
  std::vector<double> times;
  const auto start = clock_type::now();
  while (times.size() < 3 || seconds_since(start) < min_seconds) {
    for (size_t i = 0; i < evict.size(); i += 16)
      evict_sum += evict[i];
    const auto t0 = clock_type::now();
    cpu::paged_attention(q.data(), positions.data(), seqs.data(), n_seqs, cache, n_head, 0.125f, out.data(), pool);
    times.push_back(seconds_since(t0));
  }
  volatile float keep = evict_sum;  // the eviction's reads are used
  (void)keep;
  const double secs = bench::median(times);
  return {name, secs, pairs * static_cast<double>(n_head) * static_cast<double>(hd) * 4.0 / secs / 1e9};
}

// The vdpbf16ps rate the cores give, and the share of it that the GEMM's register tile reaches: every pool thread at
// once, each timing its own loop (GFLOP/s per thread, the median of the threads). The tile runs over one panel that
// sits in cache (cpu::bf16_panel_product, 384 token rows, 2048 inputs), so memory plays no part: a tile below the
// register-only rate loses in its own loop (its code, not the data's way to it). The tile read 93% of the peak while
// a row pointer and the loop bound were spilled to vector registers and moved back every step, 100% once they were
// not (2026-11-30).
struct compute_peak_result {
  double register_gflops = 0.0;  // per thread, operands in registers
  double tile_gflops = 0.0;      // per thread, the GEMM tile over a cached panel
};

#if defined(__AVX512BF16__)
double register_only_gflops(double min_s) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i)
    acc[i] = _mm512_set1_ps(0.0f);
  __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f803f80));  // (1.0, 1.0) pairs
  const __m512bh b = a;
  constexpr long steps = 1 << 20;
  double best = 0.0;
  const auto start = clock_type::now();
  do {
    const auto t0 = clock_type::now();
    for (long it = 0; it < steps; ++it) {
#pragma GCC unroll 24  // the accumulators stay in registers only when the loop is unrolled
      for (int i = 0; i < 24; ++i)
        acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
      asm volatile("" : "+v"(a));  // a new operand each step: the loop is not folded
    }
    best = std::max(best, steps * 24.0 * 64.0 / seconds_since(t0) / 1e9);
  } while (seconds_since(start) < min_s);
  float sink = 0.0f;
  for (const __m512& v : acc)
    sink += _mm512_reduce_add_ps(v);
  volatile float keep = sink;
  (void)keep;
  return best;
}

double panel_tile_gflops(double min_s) {
  constexpr int64_t n_tokens = 384, n_in = 2048, ld = n_in + 32;
  std::vector<uint16_t> w(32 * n_in), xb(n_tokens * ld);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<uint16_t>(0x3c00 + i % 251);
  for (size_t i = 0; i < xb.size(); ++i)
    xb[i] = static_cast<uint16_t>(0x3f00 + i % 241);
  std::vector<uint32_t> panel(n_in / 2 * 32);
  cpu::pack_bf16_panel(w.data(), n_in, 32, 0, n_in, panel.data());
  std::vector<float> y(n_tokens * 32);
  double best = 0.0;
  const auto start = clock_type::now();
  do {
    const auto t0 = clock_type::now();
    for (int it = 0; it < 20; ++it)
      cpu::bf16_panel_product(xb.data(), ld, n_tokens, panel.data(), n_in, y.data(), 32, 32, nullptr);
    best = std::max(best, 20 * 2.0 * n_tokens * n_in * 32 / seconds_since(t0) / 1e9);
  } while (seconds_since(start) < min_s);
  return best;
}

compute_peak_result measure_compute_peak(thread_pool& pool, double min_s) {
  const auto n = static_cast<size_t>(pool.size());
  std::vector<double> regs(n), tiles(n);
  // One index per thread; a thread that finds its index taken by a faster one simply times another.
  pool.parallel_for_dynamic(static_cast<int64_t>(n), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      regs[static_cast<size_t>(i)] = register_only_gflops(min_s);
  });
  pool.parallel_for_dynamic(static_cast<int64_t>(n), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      tiles[static_cast<size_t>(i)] = panel_tile_gflops(min_s);
  });
  return {bench::median(regs), bench::median(tiles)};
}
#else
compute_peak_result measure_compute_peak(thread_pool&, double) { return {}; }
#endif

// The batch-1 decode step's matmuls of the TinyLlama-1.1B shape (as time_decode_step) on weights drawn from N(0, 0.02)
// and rounded to bf16 (trained weights' spread: about 1.4e-4 of the values are compact panels' exceptions), packed as
// compact panels and as plain ones, each weight on huge pages of its own; gate|up one stacked weight called as the
// engine calls it, a gated pair (matmul_silu_gate).
class compact_step {
 public:
  /// `one_call`: also the same values' bytes as one compact weight of K = 2048 (form 2), read by one call.
  explicit compact_step(thread_pool& pool, bool one_call = false) {
    const std::array<std::array<int64_t, 2>, 4> layer{{{2560, 2048}, {2048, 2048}, {11264, 2048}, {2048, 5632}}};
    std::vector<std::array<int64_t, 2>> shapes;
    for (int l = 0; l < 22; ++l)
      shapes.insert(shapes.end(), layer.begin(), layer.end());
    shapes.push_back({32000, 2048});
    // bf16 draws, picked from by a fast generator below
    std::mt19937 rng(38);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> draws(65536);
    for (float& f : draws)
      f = normal(rng);
    std::array<uint16_t, 65536> values{};
    cpu::convert_from_f32(draws.data(), static_cast<int64_t>(draws.size()), dtype::bf16, values.data());
    std::vector<uint16_t> rows;
    uint64_t x = 1;
    // n_out x n_in draws into `rows`, then packed as compact panels (their bytes counted in bytes_[form]).
    auto compact_weight = [&](int64_t n_out, int64_t n_in, size_t form) {
      rows.resize(static_cast<size_t>(n_out * n_in));
      for (auto& v : rows) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v = values[x & 0xffff];
      }
      const cpu::bf16_rows part{rows.data(), n_out};
      const cpu::compact_panels_plan plan = cpu::plan_compact_panels({&part, 1}, n_in, pool);
      std::shared_ptr<host_buffer> compact = host_buffer::allocate_huge(plan.bytes());
      cpu::write_compact_panels(plan, {&part, 1}, static_cast<uint8_t*>(compact->data()), pool);
      bytes_[form] += static_cast<double>(plan.bytes());
      return compact;
    };
    for (const auto& [n_out, n_in] : shapes) {
      std::shared_ptr<host_buffer> compact = compact_weight(n_out, n_in, 0);
      std::shared_ptr<host_buffer> plain = host_buffer::allocate_huge(cpu::bf16_panels_bytes(n_out, n_in));
      cpu::pack_bf16_panels(rows.data(), n_out, n_in, static_cast<uint16_t*>(plain->data()), pool);
      weights_.push_back({n_out, n_in, std::move(compact), std::move(plain)});
      bytes_[1] += static_cast<double>(cpu::bf16_panels_bytes(n_out, n_in));
    }
    if (one_call) {
      // As many 32-row panels of K = 2048 as the step's compact bytes hold (each about 96 KiB).
      constexpr int64_t n_in = 2048;
      const double panel_bytes = 64.0 + 96.0 * n_in / 2;
      const int64_t n_out = static_cast<int64_t>(bytes_[0] / panel_bytes) * 32;
      one_call_ = weight{n_out, n_in, compact_weight(n_out, n_in, 2), nullptr};
    }
  }
  /// The step's kinds of call, in a layer's order, then the lm_head.
  static constexpr std::array<std::string_view, 5> kind_names{"q/k/v", "o", "gate/up", "down", "lm_head"};
  /// Kind of the step's call w (kind_names): four a layer, the last call the lm_head.
  size_t kind_of(size_t w) const { return w + 1 == weights_.size() ? 4 : w % 4; }
  /// Seconds of one step of `tokens` token rows on compact panels (form 0), plain ones (1), or the one compact weight
  /// read by one call (2). `by_kind` (forms 0 and 1): each kind's calls' seconds added to it, and their bytes.
  double step_seconds(thread_pool& pool, int form, int64_t tokens = 1,
                      std::array<std::array<double, 2>, 5>* by_kind = nullptr) const {
    if (form == 2) {
      std::vector<float> x(static_cast<size_t>(tokens * one_call_.n_in), 0.01f),
          y(static_cast<size_t>(tokens * one_call_.n_out));
      const cpu::matmul_target t{one_call_.compact->data(), dtype::bf16, one_call_.n_out, nullptr, y.data(), true,
                                 one_call_.compact,         true};
      const auto t0 = clock_type::now();
      cpu::matmul_group(x.data(), tokens, one_call_.n_in, std::span{&t, 1}, pool);
      return seconds_since(t0);
    }
    std::vector<float> x(static_cast<size_t>(tokens) * 5632, 0.01f), y(static_cast<size_t>(tokens) * 32000);
    const auto t0 = clock_type::now();
    for (size_t i = 0; i < weights_.size(); ++i) {
      const weight& w = weights_[i];
      const std::shared_ptr<host_buffer>& panels = form == 0 ? w.compact : w.plain;
      const cpu::matmul_target t{panels->data(), dtype::bf16, w.n_out, nullptr, y.data(), true, panels, form == 0};
      const auto call_start = clock_type::now();
      if (kind_of(i) == 2) {  // gate|up as the engine calls it: a gated pair, silu(gate) * up written to y
        const int64_t n_ff = w.n_out / 2;
        const auto* gate = static_cast<const uint8_t*>(panels->data());
        const uint8_t* up =
            form == 0 ? cpu::compact_panel(gate, n_ff / 32) : gate + cpu::bf16_panels_bytes(n_ff, w.n_in);
        cpu::matmul_silu_gate(x.data(), tokens, w.n_in, gate, up, dtype::bf16, true, form == 0, n_ff,
                              y.data() + tokens * n_ff, y.data(), pool, cpu::matmul_path::automatic, panels, panels);
      } else {
        cpu::matmul_group(x.data(), tokens, w.n_in, std::span{&t, 1}, pool);
      }
      if (by_kind != nullptr) {
        (*by_kind)[kind_of(i)][0] += seconds_since(call_start);
        (*by_kind)[kind_of(i)][1] += static_cast<double>(panels->size());
      }
    }
    return seconds_since(t0);
  }
  /// Bytes one step reads in each form.
  double bytes(int form) const { return bytes_[static_cast<size_t>(form)]; }

 private:
  struct weight {
    int64_t n_out, n_in;
    std::shared_ptr<host_buffer> compact, plain;  // on huge pages, as the loaded weights are
  };
  std::vector<weight> weights_;
  weight one_call_{};
  std::array<double, 3> bytes_{};
};

// One way of running the step in --compact-step-rounds: compact panels (form 0) or plain ones (1), under this CPU's
// decode read pattern or another (--compact-step-patterns).
struct step_way {
  std::string name;
  int form;
  std::optional<cpu::decode_read_pattern> pattern;
};

// --compact-step-patterns "2:1,4:10:48,2:5:4:wide": compact panels' streams, prefetch distance (blocks) and,
// optionally, the GEMM tiles' prefetch distance (blocks) and the width of one token's dot products (:narrow 256-bit,
// :wide 512-bit; this CPU's where not given) of each extra way.
std::vector<step_way> parse_step_patterns(const std::string& text) {
  std::vector<step_way> ways;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    cpu::decode_read_pattern p = cpu::decode_read_pattern_for(cpu::cpu_vendor(), cpu::cpu_family());
    int streams = 0, blocks = -1, gemm_blocks = p.compact_gemm_prefetch_blocks;
    char colon = 0, colon2 = ':';
    const std::string given = item;
    for (const auto& [suffix, narrow] :
         {std::pair{std::string_view{":narrow"}, true}, std::pair{std::string_view{":wide"}, false}})
      if (item.size() > suffix.size() && item.ends_with(suffix)) {
        p.compact_narrow_dots = narrow;
        item.resize(item.size() - suffix.size());
      }
    std::stringstream one(item);
    bool ok = static_cast<bool>(one >> streams >> colon >> blocks);
    if (ok && !one.eof())
      ok = static_cast<bool>(one >> colon2 >> gemm_blocks);
    if (!ok || colon != ':' || colon2 != ':' || !one.eof() || streams < 1 || streams > 4 || blocks < 0 ||
        blocks > 256 || gemm_blocks < 0 || gemm_blocks > 256)
      throw CLI::ValidationError(
          "--compact-step-patterns",
          fmt::format("'{}' is not STREAMS:BLOCKS[:GEMM_BLOCKS][:narrow|:wide] (streams 1-4, blocks 0-256)", given));
    p.compact_streams = streams;
    p.compact_prefetch_blocks = blocks;
    p.compact_gemm_prefetch_blocks = gemm_blocks;
    ways.push_back(
        {fmt::format("compact {}:{}:{}{}", streams, blocks, gemm_blocks, p.compact_narrow_dots ? ":narrow" : ""), 0,
         p});
  }
  return ways;
}

// --compact-step-profile: where the threads' time goes in five steps of `way` (thread_pool::takeover_timing), as
// shares of the steps' time: inside the pool's calls, each thread computing and reading ahead, a worker waiting for the
// next call, the calls' late starts and uneven ends; the time a call; and each kind of call's time and bytes a second
// (on the Xeon the small q/k/v and o calls read 27-28 GB/s where the larger ones read 30: each call's boundary).
void print_step_profile(thread_pool& pool, const compact_step& step, const step_way& way, int64_t tokens) {
  constexpr int steps = 5;
  cpu::set_decode_read_pattern(way.pattern);
  (void)step.step_seconds(pool, way.form, tokens);
  pool.set_takeover_timing(true);
  double seconds = 0;
  std::array<std::array<double, 2>, 5> by_kind{};
  for (int i = 0; i < steps; ++i)
    seconds += step.step_seconds(pool, way.form, tokens, &by_kind);
  const thread_pool::takeover_timing t = pool.takeover_timing_totals();
  pool.set_takeover_timing(false);
  cpu::set_decode_read_pattern(std::nullopt);
  const double ns = seconds * 1e9;
  auto share = [ns](int64_t part) { return fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / ns); };
  std::string computing, reading_ahead;
  for (size_t i = 0; i < t.compute_ns.size(); ++i) {
    computing += (i == 0 ? "" : " / ") + share(t.compute_ns[i]);
    reading_ahead += (i == 0 ? "" : " / ") + share(t.read_ahead_ns[i]);
  }
  const int64_t calls = std::max<int64_t>(1, t.calls / steps);
  fmt::print(
      "profile of {}: {} call{} a step, {:.1f} us a call; in calls {}, computing {}, reading ahead {}, a worker "
      "waiting {}, late starts {}, uneven ends {}\n",
      way.name, calls, calls == 1 ? "" : "s", seconds / steps / static_cast<double>(calls) * 1e6, share(t.call_ns),
      computing, reading_ahead, share(t.worker_wait_ns / std::max(1, pool.size() - 1)), share(t.late_start_ns),
      share(t.uneven_end_ns));
  if (way.form == 2)
    return;
  std::string kinds;
  for (size_t k = 0; k < by_kind.size(); ++k)
    kinds += fmt::format("{}{} {:.2f} ms, {:.2f} GB/s", k == 0 ? "" : "; ", compact_step::kind_names[k],
                         by_kind[k][0] / steps * 1e3, by_kind[k][1] / by_kind[k][0] / 1e9);
  fmt::print("  by kind of call, a step: {}\n", kinds);
}

// --compact-step-rounds: the step on compact and on plain panels (and on compact panels read in the patterns of
// `extra`), a step of each in turn, the order rotated at each turn so that none always runs first (an order effect of
// 1-2% showed in a driver that kept one order). Each turn also reads a pass of the probe's best pattern, and each way
// is reported against the passes of its turns too: on the 2-vCPU Zen 4 VM (2026-12-07), in its fast bandwidth state,
// single passes read about 15% below the probe's best (the fastest of its 75 passes), so "of the probe" there mixes
// the kernel's shortfall with the spread of the VM's passes.
// With `one_call`, also the same bytes as one compact weight read by one call: the kernel and a call's homes without
// the step's 89 call boundaries.
int run_compact_step_rounds(thread_pool& pool, int rounds, int reps, const std::vector<step_way>& extra, int64_t tokens,
                            bool one_call, bool profile) {
  if (!cpu::have_compact_panel_kernels()) {
    fmt::print("compact panels: not in this build (AVX512-VBMI with AVX512-BF16 needed); nothing to time\n");
    return 0;
  }
  fmt::print("packing the TinyLlama-1.1B decode step's weights as compact and as plain panels...\n");
  const compact_step step(pool, one_call);
  std::vector<step_way> ways{{"compact", 0, std::nullopt}, {"plain", 1, std::nullopt}};
  ways.insert(ways.end(), extra.begin(), extra.end());
  if (one_call)
    ways.push_back({"compact as one call", 2, std::nullopt});
  const size_t n = ways.size();
  std::vector<std::vector<double>> fraction(n), speedup(n);  // speedup: steps a second against plain's
  fmt::print("batch-{} decode step on compact panels ({:.3f} GB) and plain ones ({:.3f} GB), {} rounds\n", tokens,
             step.bytes(0) / 1e9, step.bytes(1) / 1e9, rounds);
  // pass_bw[turn]: the turn's probe pass; beside[way][turn]: the way's step, bytes/s over that pass.
  bench::probe_buffer passes{pool};
  std::vector<double> pass_bw;
  std::vector<std::vector<double>> beside(n);
  for (int r = 0; r < rounds; ++r) {
    const bench::bandwidth_probe probe = bench::probe_read_bandwidth(passes);
    const double bw = probe.bytes_per_s / 1e9;
    // The ways step by step in turn, so that the machine's drift within a round hits them alike.
    std::vector<std::vector<double>> steps(n);
    for (int i = -1; i < reps; ++i) {
      const double pass = i >= 0 ? passes.pass(probe.best) : 0.0;
      for (size_t k = 0; k < n; ++k) {
        const size_t w = (k + static_cast<size_t>(r + std::max(i, 0))) % n;
        cpu::set_decode_read_pattern(ways[w].pattern);
        const double secs = step.step_seconds(pool, ways[w].form, tokens);
        if (i >= 0) {  // each way's first step untimed
          steps[w].push_back(secs);
          beside[w].push_back(step.bytes(ways[w].form) / secs / pass);
        }
      }
      if (i >= 0)
        pass_bw.push_back(pass);
    }
    cpu::set_decode_read_pattern(std::nullopt);
    std::vector<double> seconds(n);
    for (size_t w = 0; w < n; ++w)
      seconds[w] = bench::median(steps[w]);
    std::string line = fmt::format("round {}: probe {:.2f} GB/s", r + 1, bw);
    for (size_t w = 0; w < n; ++w) {
      const double gbs = step.bytes(ways[w].form) / seconds[w] / 1e9;
      fraction[w].push_back(gbs / bw);
      speedup[w].push_back(seconds[1] / seconds[w]);
      line +=
          fmt::format(" | {} {:.2f} ms, {:.2f} GB/s ({:.1f}%)", ways[w].name, seconds[w] * 1e3, gbs, 100.0 * gbs / bw);
    }
    fmt::print("{} | compact {:.3f}x plain's steps a second\n", line, speedup[0].back());
  }
  if (profile)
    for (const step_way& way : ways)
      if (way.form != 1)
        print_step_profile(pool, step, way, tokens);
  fmt::print(
      "median: compact panels read {:.1f}% of the probe, plain {:.1f}%; compact {:.3f}x plain's steps a second (rounds "
      "{:.3f} to {:.3f})\n",
      100.0 * bench::median(fraction[0]), 100.0 * bench::median(fraction[1]), bench::median(speedup[0]),
      *std::min_element(speedup[0].begin(), speedup[0].end()), *std::max_element(speedup[0].begin(), speedup[0].end()));
  // Against the pass of each turn: all turns, and the turns whose pass was in the fastest third (this VM's fast state,
  // where the decode falls furthest below the probe).
  std::vector<double> sorted_passes = pass_bw;
  std::sort(sorted_passes.begin(), sorted_passes.end());
  const double fast_from = sorted_passes[sorted_passes.size() * 2 / 3];
  fmt::print(
      "against the probe pass read in the same turn ({} turns; passes {:.1f}-{:.1f} GB/s, fastest third from "
      "{:.1f}):\n",
      pass_bw.size(), sorted_passes.front() / 1e9, sorted_passes.back() / 1e9, fast_from / 1e9);
  for (size_t w = 0; w < n; ++w) {
    std::vector<double> fast;
    for (size_t t = 0; t < pass_bw.size(); ++t)
      if (pass_bw[t] >= fast_from)
        fast.push_back(beside[w][t]);
    fmt::print("  {}: {:.1f}% (fastest third {:.1f}%)\n", ways[w].name, 100.0 * bench::median(beside[w]),
               100.0 * bench::median(fast));
  }
  for (size_t w = 2; w < n; ++w) {
    // Bytes a second against this CPU's compact step, round by round (its steps a second where the bytes are the same)
    std::vector<double> against;
    for (int r = 0; r < rounds; ++r)
      against.push_back(fraction[w][static_cast<size_t>(r)] / fraction[0][static_cast<size_t>(r)]);
    fmt::print(
        "median: {} read {:.1f}% of the probe; {:.3f}x the compact step's bytes a second (rounds {:.3f} to "
        "{:.3f})\n",
        ways[w].name, 100.0 * bench::median(fraction[w]), bench::median(against),
        *std::min_element(against.begin(), against.end()), *std::max_element(against.begin(), against.end()));
  }
  return 0;
}

// One decode step's figures against the probe's bandwidth bw (GB/s): the step and each kind of matmul.
void print_decode_step(const decode_step_result& step, double bw) {
  fmt::print(
      "TinyLlama-1.1B batch-1 decode step, matmuls only ({} bf16, {:.2f} GB): {:.2f} ms, {:.2f} GB/s = "
      "{:.1f}% of the probe's {:.2f} GB/s\n",
      cpu::bf16_panels_preferred() ? "packed" : "row-major", step.weight_bytes / 1e9, step.seconds * 1e3, step.gbs,
      100.0 * step.gbs / bw, bw);
  for (const auto& k : step.kinds)
    if (k.bytes > 0)
      fmt::print("  {:<22} {:>8.3f} ms/step {:>8.2f} GB/s {:>6.1f}%\n", k.name, k.seconds * 1e3,
                 k.bytes / k.seconds / 1e9, 100.0 * k.bytes / k.seconds / 1e9 / bw);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU kernel benchmark: memory bandwidth, matmul GB/s and GFLOP/s, GEMV/GEMM crossover"};
  std::string json_path = "bench/results/kernels.json";
  int threads = 0;
  bool quick = false;
  int step_rounds = 0;
  // The gaps between a layer's calls measured in bench_cpu_decode's batch-1 step of the TinyLlama-1.1B shape on the
  // 2-vCPU Zen 5 VM (2026-11-30: 11, 30, 9 and 8.5 us), less the 5 us or so of each call's own set-up and return
  // that the calls here pay themselves.
  std::string gaps_text = "6,25,4,3.5";
  app.add_option("--json", json_path, "Where to write the JSON results")->capture_default_str();
  app.add_option("--decode-step-rounds", step_rounds,
                 "Only the probe and the decode step's matmuls, alternately for this many rounds (no JSON)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--decode-step-gaps", gaps_text,
                 "With --decode-step-rounds: microseconds the caller is busy before a layer's q/k/v, o, gate/up and "
                 "down calls in the step timed with gaps (four, comma separated)")
      ->capture_default_str();
  int compact_rounds = 0;
  CLI::Option* step_option = app.get_option("--decode-step-rounds");
  app.add_option("--compact-step-rounds", compact_rounds,
                 "Only the probe and the decode step's matmuls on compact panels and on plain panels of the same "
                 "values, alternated in one process with a probe pass each turn, for this many rounds (no JSON)")
      ->check(CLI::Range(1, 1000))
      ->excludes(step_option);
  int64_t compact_tokens = 1;
  app.add_option("--compact-step-tokens", compact_tokens,
                 "With --compact-step-rounds: token rows of the step (a batch-N decode step's matmuls)")
      ->check(CLI::Range(1, 512))
      ->capture_default_str();
  std::string patterns_text;
  app.add_option(
      "--compact-step-patterns", patterns_text,
      "With --compact-step-rounds: also the compact step read in these patterns, alternated with the rest: "
      "a comma list of STREAMS:BLOCKS[:GEMM_BLOCKS][:narrow|:wide] (compact streams side by side at 1-2 tokens, their "
      "prefetch distance in blocks, the GEMM tiles' at 5 tokens and more, and one token's dot products on 256-bit or "
      "512-bit vectors; this CPU's where not given)");
  bool compact_one_call = false;
  app.add_flag("--compact-step-one-call", compact_one_call,
               "With --compact-step-rounds: also the same bytes as one compact weight (K = 2048) read by one call")
      ->needs(app.get_option("--compact-step-rounds"));
  bool compact_profile = false;
  app.add_flag("--compact-step-profile", compact_profile,
               "With --compact-step-rounds: then where the threads' time goes in five steps of each compact way "
               "(computing, reading ahead, waiting, the calls' late starts and uneven ends; each kind of call's time)")
      ->needs(app.get_option("--compact-step-rounds"));
  bool compact_without_amx = false;
  app.add_flag("--compact-step-without-amx", compact_without_amx,
               "With --compact-step-rounds: batches of 5 tokens and more on vdpbf16ps register tiles instead of AMX "
               "(what a CPU without AMX runs, such as Zen 4)")
      ->needs(app.get_option("--compact-step-rounds"));
  app.add_option("--threads", threads, "Pool size (default: ACTORLLM_NUM_THREADS or all hardware threads)");
  app.add_flag("--quick", quick, "Fewer repetitions");
  std::array<double, 4> gaps{};
  std::vector<step_way> extra_ways;
  try {
    app.parse(argc, argv);
    gaps = parse_gaps(gaps_text);
    extra_ways = parse_step_patterns(patterns_text);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  std::unique_ptr<thread_pool> own_pool;
  thread_pool* pool = &thread_pool::global();
  if (threads > 0) {
    own_pool = std::make_unique<thread_pool>(threads);
    pool = own_pool.get();
  }
  double min_s = quick ? 0.2 : 1.0;
  int min_reps = quick ? 2 : 5;

  if (compact_without_amx)
    cpu::set_bf16_kernels(cpu::bf16_kernels::dot);
  if (compact_rounds > 0)
    return run_compact_step_rounds(*pool, compact_rounds, quick ? 3 : 5, extra_ways, compact_tokens, compact_one_call,
                                   compact_profile);
  if (step_rounds > 0) {
    // The probe and every way of reading alternately, so that the machine's drift hits them alike.
    fmt::print("actorllm CPU kernels: isa {}, {} threads; the decode step's matmuls against the probe, {} rounds\n",
               cpu::simd::isa_name, pool->size(), step_rounds);
    arena a(size_t{1} << 30, *pool);
    std::vector<double> fractions, one_call, with_gaps, per_call_us, fused, fused_gaps;
    // The arena as one call (the kernel with no call boundary), then as calls of 2, 8 and 32 MiB: how each call's
    // fixed cost (its set-up, start, last grain and return) shows as calls shrink. A step's calls are 8-131 MB; per
    // call, the machine reads for `per-call cost` less.
    const std::array<size_t, 4> sizes{a.bytes, size_t{2} << 20, size_t{8} << 20, size_t{32} << 20};
    std::array<std::vector<double>, 3> by_size;
    const int step_reps = quick ? 3 : 10;
    for (int r = 1; r <= step_rounds; ++r) {
      const double bw = bench::measure_read_bandwidth(*pool) / 1e9;
      const std::vector<calls_result> calls = time_calls_alternately(a, *pool, quick ? 1 : 3, sizes, 3);
      const calls_result& one = calls[0];
      one_call.push_back(one.gbs() / bw);
      for (size_t i = 0; i < by_size.size(); ++i)
        by_size[i].push_back(calls[i + 1].gbs() / bw);
      // Seconds the 2 MiB calls took beyond what one call over the same bytes takes, per call.
      const calls_result& small = calls[1];
      per_call_us.push_back(1e6 * (small.seconds - one.seconds * small.bytes / one.bytes) /
                            static_cast<double>(small.calls));
      const decode_step_result step = time_decode_step(a, *pool, step_reps);
      with_gaps.push_back(time_decode_step(a, *pool, step_reps, gaps).gbs / bw);
      fused.push_back(time_decode_step(a, *pool, step_reps, {}, true).gbs / bw);
      fused_gaps.push_back(time_decode_step(a, *pool, step_reps, gaps, true).gbs / bw);
      fmt::print("round {}: ", r);
      print_decode_step(step, bw);
      fmt::print("  one call over the same arena {:.1f}%; the step with {} us between calls {:.1f}%\n",
                 100.0 * one_call.back(), gaps_text, 100.0 * with_gaps.back());
      fmt::print("  gate/up and down as one call: the step {:.1f}%, with the gaps {:.1f}%\n", 100.0 * fused.back(),
                 100.0 * fused_gaps.back());
      fmt::print("  the arena as calls of 2, 8 and 32 MiB: {:.1f}% {:.1f}% {:.1f}%; per-call cost {:.1f} us\n",
                 100.0 * by_size[0].back(), 100.0 * by_size[1].back(), 100.0 * by_size[2].back(), per_call_us.back());
      fractions.push_back(step.gbs / bw);
    }
    fmt::print("median one call / probe: {:.1f}%\n", 100.0 * bench::median(one_call));
    fmt::print("median calls of 2, 8 and 32 MiB / probe: {:.1f}% {:.1f}% {:.1f}%\n", 100.0 * bench::median(by_size[0]),
               100.0 * bench::median(by_size[1]), 100.0 * bench::median(by_size[2]));
    fmt::print("median per-call cost (2 MiB calls against one call): {:.1f} us\n", bench::median(per_call_us));
    fmt::print("median step / probe: {:.1f}%\n", 100.0 * bench::median(fractions));
    fmt::print("median step with gaps / probe: {:.1f}%\n", 100.0 * bench::median(with_gaps));
    fmt::print("median step, gate/up and down as one call / probe: {:.1f}%; with the gaps {:.1f}%\n",
               100.0 * bench::median(fused), 100.0 * bench::median(fused_gaps));
    return 0;
  }
  fmt::print("actorllm CPU kernels: isa {}, {} threads\n", cpu::simd::isa_name, pool->size());
  // The same roofline denominator as bench_cpu_decode.
  double bw = bench::measure_read_bandwidth(*pool, size_t{1} << 30, quick ? 3 : 8) / 1e9;
  arena a(size_t{1} << 30, *pool);
  fmt::print("memory bandwidth (streaming read of 1 GiB, {} threads): {:.2f} GB/s\n", pool->size(), bw);

  double dispatch_us = measure_dispatch_us(*pool, quick ? 20000 : 100000);
  fmt::print("parallel_for dispatch + join (empty chunks): {:.2f} us\n", dispatch_us);
  const compute_peak_result peak = measure_compute_peak(*pool, quick ? 0.2 : 0.5);
  if (peak.register_gflops > 0.0)
    fmt::print(
        "vdpbf16ps per thread, all threads at once: {:.1f} GFLOP/s registers only, {:.1f} GFLOP/s in the GEMM "
        "tile over a cached panel ({:.1f}%)\n",
        peak.register_gflops, peak.tile_gflops, 100.0 * peak.tile_gflops / peak.register_gflops);
  else
    fmt::print("vdpbf16ps: not in this build (no AVX512-BF16)\n");
  fmt::print("\n");

  std::vector<matmul_result> results;
  auto add = [&](matmul_result r) {
    fmt::print("{:<14} {:>5} {:>6} x {:>6} -> {:>6}  {:>4} {:>4}  {:>10.3f} ms  {:>8.2f} GB/s  {:>8.2f} GFLOP/s\n",
               r.name, r.dtype, r.n_tokens, r.n_in, r.n_out, r.path, r.kernels, r.seconds * 1e3, r.weight_gbs,
               r.gflops);
    results.push_back(std::move(r));
  };
  fmt::print("{:<14} {:>5} {:>6}   {:>6}    {:>6}  {:>4} {:>4}  {:>13}  {:>13}  {:>16}\n", "case", "dtype", "tokens",
             "n_in", "n_out", "path", "kern", "time", "weight BW", "compute");
  // bf16 runs on both kernel families where the CPU has vdpbf16ps, alternated so that drift hits both alike.
  std::vector<cpu::bf16_kernels> bf16_families{cpu::bf16_kernels::best};
  if (cpu::have_bf16_dot_kernels())
    bf16_families.push_back(cpu::bf16_kernels::fma);
  if (cpu::have_bf16_dot_kernels()) {
    add(time_matmul(a, *pool, dtype::bf16, 1, 2048, 8192, cpu::matmul_path::automatic, min_s, min_reps, "decode_ffn",
                    cpu::bf16_kernels::best, true));
    add(time_matmul(a, *pool, dtype::bf16, 1, 2048, 128256, cpu::matmul_path::automatic, min_s, min_reps,
                    "decode_vocab", cpu::bf16_kernels::best, true));
    // The GEMMs on packed panels: AMX tiles where the process may use them, beside vdpbf16ps alone.
    std::vector<cpu::bf16_kernels> gemm_families{cpu::bf16_kernels::best};
    if (cpu::amx_bf16_usable())
      gemm_families.push_back(cpu::bf16_kernels::dot);
    for (auto k : gemm_families) {
      for (int64_t t : {8, 16, 32})
        add(time_matmul(a, *pool, dtype::bf16, t, 2048, 8192, cpu::matmul_path::automatic, min_s, min_reps,
                        "decode_b" + std::to_string(t), k, true));
      add(time_matmul(a, *pool, dtype::bf16, 512, 2048, 8192, cpu::matmul_path::automatic, quick ? 0.5 : 2.0, 2,
                      "prefill_512", k, true));
      add(time_matmul(a, *pool, dtype::bf16, 512, 5632, 2048, cpu::matmul_path::automatic, quick ? 0.5 : 2.0, 2,
                      "prefill_down", k, true));
    }
  } else if (cpu::bf16_panels_preferred()) {
    // An AVX2 build: the FMA kernels on packed panels, as the CPU backend loads bf16 weights here (the row-major rows
    // below are the kernels it read before), and the crossover between the panel GEMV and the GEMM.
    add(time_matmul(a, *pool, dtype::bf16, 1, 2048, 8192, cpu::matmul_path::automatic, min_s, min_reps, "decode_ffn",
                    cpu::bf16_kernels::best, true));
    add(time_matmul(a, *pool, dtype::bf16, 1, 2048, 128256, cpu::matmul_path::automatic, min_s, min_reps,
                    "decode_vocab", cpu::bf16_kernels::best, true));
    for (int64_t t : {2, 8, 32})
      add(time_matmul(a, *pool, dtype::bf16, t, 2048, 8192, cpu::matmul_path::automatic, min_s, min_reps,
                      "decode_b" + std::to_string(t), cpu::bf16_kernels::best, true));
    add(time_matmul(a, *pool, dtype::bf16, 512, 2048, 8192, cpu::matmul_path::automatic, quick ? 0.5 : 2.0, 2,
                    "prefill_512", cpu::bf16_kernels::best, true));
    add(time_matmul(a, *pool, dtype::bf16, 512, 5632, 2048, cpu::matmul_path::automatic, quick ? 0.5 : 2.0, 2,
                    "prefill_down", cpu::bf16_kernels::best, true));
    for (int64_t t : {2, 3, 4, 6}) {
      add(time_matmul(a, *pool, dtype::bf16, t, 2048, 8192, cpu::matmul_path::gemv, min_s / 2, 3, "crossover_pack",
                      cpu::bf16_kernels::best, true));
      add(time_matmul(a, *pool, dtype::bf16, t, 2048, 8192, cpu::matmul_path::gemm, min_s / 2, 3, "crossover_pack",
                      cpu::bf16_kernels::best, true));
    }
  }
  for (auto k : bf16_families) {
    add(time_matmul(a, *pool, dtype::bf16, 1, 2048, 8192, cpu::matmul_path::automatic, min_s, min_reps, "decode_ffn",
                    k));
    add(time_matmul(a, *pool, dtype::bf16, 1, 2048, 128256, cpu::matmul_path::automatic, min_s, min_reps,
                    "decode_vocab", k));
    add(time_matmul(a, *pool, dtype::bf16, 32, 2048, 8192, cpu::matmul_path::automatic, min_s, min_reps, "decode_b32",
                    k));
  }
  for (dtype wt : {dtype::f16, dtype::f32}) {
    add(time_matmul(a, *pool, wt, 1, 2048, 8192, cpu::matmul_path::automatic, min_s, min_reps, "decode_ffn"));
    add(time_matmul(a, *pool, wt, 1, 2048, 128256, cpu::matmul_path::automatic, min_s, min_reps, "decode_vocab"));
  }
  for (auto k : bf16_families)
    add(time_matmul(a, *pool, dtype::bf16, 512, 2048, 8192, cpu::matmul_path::automatic, quick ? 0.5 : 2.0, 2,
                    "prefill_512", k));
  for (dtype wt : {dtype::f16, dtype::f32})
    add(time_matmul(a, *pool, wt, 512, 2048, 8192, cpu::matmul_path::automatic, quick ? 0.5 : 2.0, 2, "prefill_512"));
  for (int64_t t : {4, 8, 16, 32, 64, 128, 256}) {
    add(time_matmul(a, *pool, dtype::bf16, t, 2048, 8192, cpu::matmul_path::gemv, min_s / 2, 3, "crossover"));
    add(time_matmul(a, *pool, dtype::bf16, t, 2048, 8192, cpu::matmul_path::gemm, min_s / 2, 3, "crossover"));
  }
  cpu::set_bf16_kernels(cpu::bf16_kernels::best);

  std::vector<attention_result> attention;
  attention.push_back(time_attention(*pool, "prefill_512", 1, 512, 512, min_s));
  attention.push_back(time_attention(*pool, "decode_b32_ctx512", 32, 1, 512, min_s));
  attention.push_back(time_attention(*pool, "decode_b1_ctx2048", 1, 1, 2048, min_s));
  attention.push_back(time_attention(*pool, "prefill_512_bf16kv", 1, 512, 512, min_s, dtype::bf16));
  attention.push_back(time_attention(*pool, "decode_b32_ctx512_bf16kv", 32, 1, 512, min_s, dtype::bf16));
  attention.push_back(time_attention(*pool, "decode_b1_ctx2048_bf16kv", 1, 1, 2048, min_s, dtype::bf16));
  attention.push_back(
      time_attention(*pool, "decode_b32_ctx512_bf16kv_cold", 32, 1, 512, min_s, dtype::bf16, /*cold=*/true));
  attention.push_back(
      time_attention(*pool, "decode_b1_ctx2048_bf16kv_cold", 1, 1, 2048, min_s, dtype::bf16, /*cold=*/true));
  fmt::print(
      "\npaged attention, one layer (32 heads, 4 kv heads, head_dim 64; an f32 cache, or bf16 where named; cold: "
      "its rows evicted from the caches before each call):\n");
  for (const auto& r : attention)
    fmt::print("{:<30} {:>8.3f} ms  {:>8.2f} GFLOP/s\n", r.name, r.seconds * 1e3, r.gflops);

  decode_step_result step = time_decode_step(a, *pool, quick ? 3 : 10);
  fmt::print("\n");
  print_decode_step(step, bw);

  json_writer j;
  j.begin_object();
  j.key("isa").value(cpu::simd::isa_name);
  j.key("threads").value(pool->size());
  j.key("memory_bandwidth_gbs").value(bw);
  j.key("parallel_for_dispatch_us").value(dispatch_us);
  j.key("bf16_dot_register_gflops_per_thread").value(peak.register_gflops);
  j.key("bf16_gemm_tile_gflops_per_thread").value(peak.tile_gflops);
  j.key("matmul").begin_array();
  for (const auto& r : results) {
    j.begin_object();
    j.key("case").value(r.name);
    j.key("dtype").value(r.dtype);
    j.key("n_tokens").value(r.n_tokens);
    j.key("n_in").value(r.n_in);
    j.key("n_out").value(r.n_out);
    j.key("path").value(r.path);
    j.key("kernels").value(r.kernels);
    j.key("seconds").value(r.seconds);
    j.key("weight_gbs").value(r.weight_gbs);
    j.key("gflops").value(r.gflops);
    j.key("fraction_of_bandwidth").value(r.weight_gbs / bw);
    if (peak.register_gflops > 0.0)  // of all threads' vdpbf16ps rate
      j.key("fraction_of_compute_peak").value(r.gflops / (peak.register_gflops * pool->size()));
    j.end_object();
  }
  j.end_array();
  j.key("attention").begin_array();
  for (const auto& r : attention) {
    j.begin_object();
    j.key("case").value(r.name);
    j.key("seconds").value(r.seconds);
    j.key("gflops").value(r.gflops);
    j.end_object();
  }
  j.end_array();
  j.key("decode_step_tinyllama_1_1b_bf16").begin_object();
  j.key("seconds").value(step.seconds);
  j.key("weight_bytes").value(step.weight_bytes);
  j.key("weight_gbs").value(step.gbs);
  j.key("fraction_of_bandwidth").value(step.gbs / bw);
  j.key("kinds").begin_array();
  for (const auto& k : step.kinds) {
    j.begin_object();
    j.key("matmul").value(k.name);
    j.key("seconds").value(k.seconds);
    j.key("weight_bytes").value(k.bytes);
    j.end_object();
  }
  j.end_array();
  j.end_object();
  j.end_object();

  std::filesystem::path out(json_path);
  if (out.has_parent_path())
    std::filesystem::create_directories(out.parent_path());
  std::ofstream f(out);
  f << j.str() << "\n";
  if (!f) {
    std::fprintf(stderr, "bench_kernels: cannot write %s\n", json_path.c_str());
    return 1;
  }
  fmt::print("wrote {}\n", json_path);
  return 0;
}
