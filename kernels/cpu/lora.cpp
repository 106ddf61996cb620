// The batched LoRA update on the CPU.
#include "kernels/cpu/lora.hpp"

#include "kernels/cpu/simd.hpp"

#include <vector>

namespace actorllm::cpu {

namespace {

/// sum_i p[i] * q[i], in vector lanes then a fixed reduction (the same order for every call of one length).
float dot(const float* p, const float* q, int64_t n) {
  simd::vf acc = simd::zero();
  int64_t i = 0;
  for (; i + simd::width <= n; i += simd::width)
    acc = simd::fmadd(simd::load(p + i), simd::load(q + i), acc);
  float sum = simd::reduce_add(acc);
  for (; i < n; ++i)
    sum += p[i] * q[i];
  return sum;
}

// Below this many multiply-adds a call runs on the calling thread: waking the pool costs more.
constexpr int64_t parallel_min_work = int64_t{1} << 16;

}  // namespace

void lora_add(const float* x, const float* a, const float* b, const int32_t* row_slots, const lora_shape& s,
              float* shrunk, float* y, thread_pool& pool) {
  std::vector<int64_t> rows;  // the rows that have an adapter
  rows.reserve(static_cast<size_t>(s.n));
  for (int64_t t = 0; t < s.n; ++t)
    if (row_slots[t] >= 0)
      rows.push_back(t);
  if (rows.empty() || s.rank == 0)
    return;
  const auto n_rows = static_cast<int64_t>(rows.size());
  const bool parallel = pool.size() > 1 && n_rows * s.rank * (s.n_in + s.n_out) >= parallel_min_work;

  // Shrink: one dot product of length n_in per (row, rank) pair.
  auto shrink = [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t t = rows[static_cast<size_t>(k / s.rank)], r = k % s.rank;
      const float* ar = a + (static_cast<int64_t>(row_slots[t]) * s.rank + r) * s.n_in;
      shrunk[t * s.rank + r] = dot(ar, x + t * s.n_in, s.n_in);
    }
  };
  // Expand: one dot product of length rank per (row, output) pair, split over the outputs.
  auto expand = [&](int64_t begin, int64_t end) {
    for (int64_t k = 0; k < n_rows; ++k) {
      const int64_t t = rows[static_cast<size_t>(k)];
      const float* bs = b + static_cast<int64_t>(row_slots[t]) * s.n_out * s.rank;
      const float* st = shrunk + t * s.rank;
      float* yt = y + t * s.n_out;
      for (int64_t o = begin; o < end; ++o)
        yt[o] += dot(bs + o * s.rank, st, s.rank);
    }
  };
  if (!parallel) {
    shrink(0, n_rows * s.rank);
    expand(0, s.n_out);
    return;
  }
  pool.parallel_for(n_rows * s.rank, shrink);
  pool.parallel_for(s.n_out, expand);
}

}  // namespace actorllm::cpu
