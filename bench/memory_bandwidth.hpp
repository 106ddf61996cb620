// Measures this machine's sustained memory read bandwidth, the denominator of every decode roofline.
#pragma once

#include "util/thread_pool.hpp"

#include "kernels/cpu/simd.hpp"  // first: it wraps <immintrin.h> against GCC 12 false warnings

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace actorllm::bench {

/// Best-of-`reps` bytes/s for all pool threads streaming through a `bytes`-sized buffer (far larger than the caches),
/// reading every cache line once per pass.
inline double measure_read_bandwidth(thread_pool& pool, size_t bytes = size_t{1} << 30, int reps = 5) {
  const size_t n = bytes / sizeof(float);
  std::unique_ptr<float[]> buf(new float[n]);
  pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
    std::memset(buf.get() + b, 1, static_cast<size_t>(e - b) * sizeof(float));
  });
  double best = 0.0;
  std::vector<float> sink(static_cast<size_t>(pool.size()) * 16, 0.0f);
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(static_cast<int64_t>(n / 16), [&](int64_t b, int64_t e) {
#if defined(__AVX512F__)
      __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
      int64_t i = b;
      for (; i + 4 <= e; i += 4) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(buf.get() + (i + 0) * 16));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(buf.get() + (i + 1) * 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(buf.get() + (i + 2) * 16));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(buf.get() + (i + 3) * 16));
      }
      for (; i < e; ++i)
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(buf.get() + i * 16));
      float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#else
      float s = 0.0f;
      for (int64_t i = b; i < e; ++i)
        for (int j = 0; j < 16; ++j)
          s += buf[static_cast<size_t>(i * 16 + j)];
#endif
      sink[static_cast<size_t>(b % static_cast<int64_t>(sink.size()))] += s;
    });
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n / 16 * 16 * sizeof(float)) / secs);
  }
  volatile float keep = sink[0];
  (void)keep;
  return best;
}

}  // namespace actorllm::bench
