// Measures this machine's sustained memory read bandwidth, the denominator of every decode roofline.
//
// One access pattern underestimates a machine: depending on the CPU (and on a VM's host), one sequential stream per
// core, or several interleaved ones, with or without software prefetch at some distance, reads fastest. So the probe
// tries a set of patterns over a huge-page-backed buffer (as the packed weights are) and reports the best: what the
// machine can really read, which no kernel should claim to beat.
#pragma once

#include "kernels/tensor.hpp"
#include "util/thread_pool.hpp"

#include "kernels/cpu/simd.hpp"  // first: it wraps <immintrin.h> against GCC 12 false warnings

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace actorllm::bench {

/// One way of reading a buffer: `streams` interleaved sequential streams per thread, `lines` cache lines of a stream
/// read in a row before the next stream's, each line prefetched `prefetch` bytes ahead (0: hardware prefetch only),
/// non-temporally when `nta`.
struct read_pattern {
  int streams = 1;
  int prefetch = 0;
  bool nta = false;
  int lines = 1;
  bool operator==(const read_pattern&) const = default;
  std::string name() const {
    return fmt::format("{} stream{}{}, prefetch {}{}", streams, streams > 1 ? "s" : "",
                       lines > 1 ? fmt::format(" of {} lines", lines) : std::string{},
                       prefetch == 0 ? std::string{"off"} : fmt::format("{} B", prefetch), nta ? " (nta)" : "");
  }
};

/// The probe's result: the best bandwidth and the pattern that reached it.
struct bandwidth_probe {
  double bytes_per_s = 0;
  read_pattern best;
};

namespace detail {

namespace simd = cpu::simd;

// Bytes/s of one pass of all pool threads over buf (n_lines cache lines) in `p`.
inline double read_pass(thread_pool& pool, const float* buf, int64_t n_lines, const read_pattern& p,
                        std::vector<float>& sink) {
  const auto t0 = std::chrono::steady_clock::now();
  pool.parallel_for(n_lines, [&](int64_t b, int64_t e) {
    float total = 0.0f;
#if defined(ACTORLLM_SIMD_AVX512) || defined(ACTORLLM_SIMD_AVX2)
    // A cache line is 16 floats: one AVX-512 vector, two AVX2 ones.
    constexpr int per_line = 16 / simd::width;
    const int64_t streams = p.streams, lines = p.lines;
    const int64_t len = (e - b) / streams / lines * lines;  // lines per stream, whole runs of `lines`
    simd::vf acc[8];
    for (auto& a : acc)
      a = simd::zero();
    for (int64_t i = 0; i < len; i += lines)
      for (int64_t s = 0; s < streams; ++s)
        for (int64_t l = 0; l < lines; ++l) {
          const float* line = buf + (b + s * len + i + l) * 16;
          if (p.prefetch > 0 && p.nta)
            _mm_prefetch(reinterpret_cast<const char*>(line) + p.prefetch, _MM_HINT_NTA);
          else if (p.prefetch > 0)
            _mm_prefetch(reinterpret_cast<const char*>(line) + p.prefetch, _MM_HINT_T0);
          for (int v = 0; v < per_line; ++v)
            acc[(s + l + v) & 7] = simd::add(acc[(s + l + v) & 7], simd::load(line + v * simd::width));
        }
    for (int64_t i = b + streams * len; i < e; ++i)
      for (int v = 0; v < per_line; ++v)
        acc[v] = simd::add(acc[v], simd::load(buf + i * 16 + v * simd::width));
    for (int s = 1; s < 8; ++s)
      acc[0] = simd::add(acc[0], acc[s]);
    total = simd::reduce_add(acc[0]);
#else
    (void)p;  // one scalar pattern only
    for (int64_t i = b; i < e; ++i)
      for (int j = 0; j < 16; ++j)
        total += buf[i * 16 + j];
#endif
    sink[static_cast<size_t>(b % static_cast<int64_t>(sink.size()))] += total;
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(n_lines) * 64.0 / secs;
}

}  // namespace detail

/// The patterns the probe tries. Runs of 4 or 8 lines a stream: on the 2-vCPU Zen 4 VM in its fast bandwidth state
/// (2026-11-30, passes alternated in bench_probe_passes, 21 cycles) 8 streams of 4 lines read 13% more than the best
/// of the one-line patterns (4 streams, prefetch 512 B), 4 streams of 4 lines 8-9% more; in the slow state all read
/// within 2% of each other. Without them the probe was not the ceiling: the decode kernel's own reads (4 streams of 2
/// lines a step, each asking for the next step) beat it by 9% in that state.
inline std::vector<read_pattern> probe_patterns() {
  std::vector<read_pattern> out;
  for (int streams : {1, 2, 4, 8}) {
    for (int prefetch : {0, 512, 1024, 2048})
      out.push_back({streams, prefetch});
    out.push_back({streams, 1024, true});  // the non-temporal prefetch the bf16 decode kernels used until 2026-11-30
  }
  for (int streams : {2, 4, 8})
    for (int prefetch : {0, 256})
      out.push_back({streams, prefetch, false, 4});
  for (int streams : {4, 8})
    out.push_back({streams, 0, false, 8});
  return out;
}

/// The pattern that passes read beside a measurement read besides the round's best, the higher kept: 8 streams of 4
/// lines, the fastest in the Zen 4 VM's fast bandwidth state (2026-11-30: 13% over the best one-line pattern) and
/// within 2% of the best in its slow one, where every pattern reads alike. A round whose probe met only the slow state
/// picks its best among near-equals, which can read 10% less in the fast state, and a decode that met the fast state
/// would then be held to that.
inline read_pattern beside_reference_pattern() { return {8, 0, false, 4}; }

/// A buffer far larger than the caches, on huge pages (as the packed weights are), read in one pass at a time by all
/// pool threads in a given pattern: the probe's passes, and the passes read beside a measurement, between its parts
/// (bench/paired_roofline.hpp).
class probe_buffer {
 public:
  explicit probe_buffer(thread_pool& pool, size_t bytes = size_t{1} << 30)
      : pool_(pool),
        n_lines_(static_cast<int64_t>(bytes / 64)),
        buf_(host_buffer::allocate_huge(bytes)),
        sink_(static_cast<size_t>(pool.size()) * 16, 0.0f) {
    auto* data = static_cast<float*>(buf_->data());
    pool_.parallel_for(n_lines_,
                       [&](int64_t b, int64_t e) { std::memset(data + b * 16, 1, static_cast<size_t>(e - b) * 64); });
  }
  /// Bytes/s of one pass in `p`.
  double pass(const read_pattern& p) {
    const double bw = detail::read_pass(pool_, static_cast<const float*>(buf_->data()), n_lines_, p, sink_);
    volatile float keep = sink_[0];  // the sums are used
    (void)keep;
    return bw;
  }

 private:
  thread_pool& pool_;
  int64_t n_lines_;
  std::shared_ptr<host_buffer> buf_;
  std::vector<float> sink_;
};

/// Best-of-`reps` bytes/s for each pattern over `buffer`, all pool threads reading every cache line once per pass;
/// returns the best pattern.
inline bandwidth_probe probe_read_bandwidth(probe_buffer& buffer, int reps = 3) {
  bandwidth_probe best;
  for (int r = 0; r < reps; ++r)  // rounds over all patterns, so that drift of the machine hits each alike
    for (const read_pattern& p : probe_patterns()) {
      const double bw = buffer.pass(p);
      if (bw > best.bytes_per_s)
        best = {bw, p};
    }
  return best;
}

/// The same over a `bytes`-sized buffer of its own (far larger than the caches).
inline bandwidth_probe probe_read_bandwidth(thread_pool& pool, size_t bytes = size_t{1} << 30, int reps = 3) {
  probe_buffer buffer{pool, bytes};
  return probe_read_bandwidth(buffer, reps);
}

/// The best pattern's bandwidth alone: the roofline denominator of the other benchmarks.
inline double measure_read_bandwidth(thread_pool& pool, size_t bytes = size_t{1} << 30, int reps = 3) {
  return probe_read_bandwidth(pool, bytes, reps).bytes_per_s;
}

}  // namespace actorllm::bench
