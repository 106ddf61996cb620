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
      // Several interleaved streams per thread (as a GEMV over several weight rows reads), each prefetched ahead:
      // one sequential stream per core leaves DRAM bandwidth unused.
      constexpr int64_t n_streams = 8;
      const int64_t len = (e - b) / n_streams;
      __m512 acc[n_streams];
      for (auto& a : acc)
        a = _mm512_setzero_ps();
      for (int64_t i = 0; i < len; ++i)
        for (int64_t s = 0; s < n_streams; ++s) {
          const float* p = buf.get() + (b + s * len + i) * 16;
          _mm_prefetch(reinterpret_cast<const char*>(p + 8 * 16), _MM_HINT_T0);
          acc[s] = _mm512_add_ps(acc[s], _mm512_loadu_ps(p));
        }
      for (int64_t i = b + n_streams * len; i < e; ++i)
        acc[0] = _mm512_add_ps(acc[0], _mm512_loadu_ps(buf.get() + i * 16));
      for (int64_t s = 1; s < n_streams; ++s)
        acc[0] = _mm512_add_ps(acc[0], acc[s]);
      float s = _mm512_reduce_add_ps(acc[0]);
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
