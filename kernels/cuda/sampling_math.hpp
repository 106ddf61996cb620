// The GPU sampler's per-row algorithm as __host__ __device__ code over a "block of cooperating threads": the kernel in
// sampling.cu runs sample_one_row with one CUDA block per row, and the tests run the very same function on the CPU with
// serial_block (one thread) or a simulated multi-thread block, against kernels/cpu/sampling (whose semantics are the
// contract). Instead of sorting the row, every threshold (top-n logprobs, top_k, top_p, the draw) is found by
// bisection over an order-preserving integer image of the values, each step one block-wide reduction over the row.
// Everything that depends only on token ids (masks, banned ids, biases, penalty counts, the uniform draw) is prepared
// on the host by sampling_plan.hpp into the descriptors below.
#pragma once

#include <float.h>
#include <math.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/host_device.hpp"

namespace actorllm::cuda::sampling {

/// Temperatures below this are greedy (ops::sampling_params::greedy_below, vLLM's _SAMPLING_EPS).
inline constexpr float greedy_below = 1e-5f;

/// One row's settings and where its id-derived edits lie in the batch's arrays. Plain data, uploaded as is.
struct row_desc {
  float temperature = 1.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t top_k = 0;
  int32_t n_top = 0;         ///< top logprobs to collect (0: none), at most n_vocab
  int64_t top_offset = 0;    ///< the row's first slot in batch_view::top_token / top_value
  double u = 0.0;            ///< the uniform draw in [0, 1) (unused when greedy)
  int64_t mask_offset = -1;  ///< first word of the row's allow-bitmask in batch_view::masks; -1: every token allowed
  int64_t work_offset = -1;  ///< first float of the row's processed logits in batch_view::work; -1: raw logits as is
  int32_t banned_begin = 0, banned_end = 0;    ///< ids set to -inf (bad words, min_tokens stop ids)
  int32_t bias_begin = 0, bias_end = 0;        ///< logit_bias, sorted stably by token
  int32_t penalty_begin = 0, penalty_end = 0;  ///< distinct penalised tokens with their output counts
};

/// What the kernel returns per row; sampling_plan turns it into an ops::sample_result.
struct row_out {
  int32_t token = 0;
  int32_t degenerate = 0;    ///< 1: nothing could be drawn (no finite logit after the processors): no draw used
  float token_value = 0.0f;  ///< the sampled token's raw logit (NaN-free)
  float raw_max = 0.0f;      ///< max of the raw logits (-inf when all are -inf)
  float raw_log_sum = 0.0f;  ///< log(sum(exp(raw - raw_max))), 0 when raw_max is -inf
  int32_t n_top = 0;         ///< entries written to the row's top slots (unsorted)
};

/// A batch as the algorithm sees it: pointers into host memory in tests, into device memory in the kernel.
struct batch_view {
  const float* logits = nullptr;  ///< [n_rows, n_vocab], never written
  int64_t n_vocab = 0;
  const row_desc* rows = nullptr;
  const uint64_t* masks = nullptr;
  const int32_t* banned = nullptr;
  const int32_t* bias_token = nullptr;
  const float* bias_value = nullptr;
  const int32_t* penalty_token = nullptr;
  const int32_t* penalty_count = nullptr;
  float* work = nullptr;  ///< scratch rows for the rows with a work_offset
  row_out* out = nullptr;
  int32_t* top_token = nullptr;
  float* top_value = nullptr;
};

// ---- value helpers -------------------------------------------------------------------------------------------------

/// NaN as -inf ("never"), +inf as the largest finite float: the CPU sampler's first step.
ACTORLLM_HOST_DEVICE inline float sanitize(float v) { return v != v ? -INFINITY : fminf(v, FLT_MAX); }

/// An unsigned image of a non-NaN float with the same order; -0 and +0 map to the same value, since the CPU compares
/// them equal (ties).
ACTORLLM_HOST_DEVICE inline uint32_t order_bits(float v) {
  if (v == 0.0f)
    v = 0.0f;
#ifdef __CUDA_ARCH__
  const uint32_t bits = __float_as_uint(v);
#else
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
#endif
  return (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
}

/// A total order on (value, id) as the CPU ranks tokens: a larger value first, then the lower id. Fits 64 bits for any
/// vocabulary below 2^31.
ACTORLLM_HOST_DEVICE inline uint64_t rank_key(float v, int64_t id, int64_t n_vocab) {
  return static_cast<uint64_t>(order_bits(v)) * static_cast<uint64_t>(n_vocab) +
         static_cast<uint64_t>(n_vocab - 1 - id);
}

// Products and quotients rounded once, as on the CPU: nvcc would otherwise fuse `a - b * c` into one FMA.
ACTORLLM_HOST_DEVICE inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
ACTORLLM_HOST_DEVICE inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// Reduction operators a block applies; identity() is what a thread with no element contributes.
struct sum_op {
  template <class T>
  ACTORLLM_HOST_DEVICE T operator()(T a, T b) const {
    return a + b;
  }
};
struct max_op {
  template <class T>
  ACTORLLM_HOST_DEVICE T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
struct min_op {
  template <class T>
  ACTORLLM_HOST_DEVICE T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};

/// The smallest t in [lo, hi] with pred(t), for a pred that is false up to some point and true from there on and true
/// at hi. Every thread of a block calls it with the same arguments; pred does one block reduction, so all threads take
/// the same branches.
template <class Pred>
ACTORLLM_HOST_DEVICE uint64_t lowest_true(uint64_t lo, uint64_t hi, Pred pred) {
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (pred(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/// The host's one-thread block: reductions return their argument. The Block interface sample_one_row needs:
/// rank()/size(), reduce(v, op) (every thread gets the same result), sync() (a barrier that also orders memory),
/// reset_claims() (a barrier, then claim() restarts at 0) and claim() (a distinct slot per call across the block).
struct serial_block {
  int rank() const { return 0; }
  int size() const { return 1; }
  template <class T, class Op>
  T reduce(T v, Op) {
    return v;
  }
  void sync() {}
  void reset_claims() { claims_ = 0; }
  int claim() { return claims_++; }

 private:
  int claims_ = 0;
};

/// Samples row `row` of `batch`: writes batch.out[row], the row's top slots and, for a row with a work_offset, its
/// processed logits. Same steps and semantics as cpu::sample (kernels/cpu/sampling.hpp): raw statistics and top
/// logprobs from the NaN-free raw logits; the allow-mask, banned ids, biases and penalties; then greedy argmax (ties to
/// the lowest id) or min_p, top_k (ties at the threshold kept), top_p (in (value, id) rank order, the first token
/// always kept) and the draw u * total over the survivors in id order. Sums are in double, in another order than the
/// CPU's, so only draws within rounding of a boundary can differ.
template <class Block>
ACTORLLM_HOST_DEVICE void sample_one_row(Block& b, const batch_view& batch, int64_t row) {
  const row_desc& d = batch.rows[row];
  const int64_t n = batch.n_vocab;
  const float* raw = batch.logits + row * n;
  const int64_t first = b.rank(), stride = b.size();

  // ---- raw statistics: the logprobs describe the model's distribution, not the processed one --------------------
  float raw_max = -INFINITY;
  for (int64_t i = first; i < n; i += stride)
    raw_max = fmaxf(raw_max, sanitize(raw[i]));
  raw_max = b.reduce(raw_max, max_op{});
  double raw_sum = 0.0;
  if (raw_max != -INFINITY)
    for (int64_t i = first; i < n; i += stride)
      raw_sum += expf(sanitize(raw[i]) - raw_max);
  raw_sum = b.reduce(raw_sum, sum_op{});

  int32_t n_top = 0;
  if (d.n_top > 0) {
    // The n_top-th largest key: the smallest key with fewer than n_top keys above it.
    uint64_t lo = ~uint64_t{0}, hi = 0;
    for (int64_t i = first; i < n; i += stride) {
      const uint64_t k = rank_key(sanitize(raw[i]), i, n);
      lo = lo < k ? lo : k;
      hi = hi < k ? k : hi;
    }
    lo = b.reduce(lo, min_op{});
    hi = b.reduce(hi, max_op{});
    const uint64_t threshold = lowest_true(lo, hi, [&](uint64_t t) {
      double above = 0.0;
      for (int64_t i = first; i < n; i += stride)
        above += rank_key(sanitize(raw[i]), i, n) > t ? 1.0 : 0.0;
      return b.reduce(above, sum_op{}) < static_cast<double>(d.n_top);
    });
    b.reset_claims();
    for (int64_t i = first; i < n; i += stride) {
      const float v = sanitize(raw[i]);
      if (rank_key(v, i, n) >= threshold) {
        const int slot = b.claim();
        if (slot < d.n_top) {  // always, as the keys are distinct; the guard keeps a bug from writing out of bounds
          batch.top_token[d.top_offset + slot] = static_cast<int32_t>(i);
          batch.top_value[d.top_offset + slot] = v;
        }
      }
    }
    n_top = d.n_top;  // the keys are distinct, so exactly n_top are at or above the n_top-th
  }

  // ---- logits processors and penalties, into the row's work copy ------------------------------------------------
  float* work = d.work_offset >= 0 ? batch.work + d.work_offset : nullptr;
  if (work != nullptr) {
    const uint64_t* mask = d.mask_offset >= 0 ? batch.masks + d.mask_offset : nullptr;
    for (int64_t i = first; i < n; i += stride) {
      const bool allowed = mask == nullptr || ((mask[i / 64] >> (i % 64)) & 1u) != 0;
      work[i] = allowed ? sanitize(raw[i]) : -INFINITY;
    }
    b.sync();
    for (int64_t j = d.banned_begin + first; j < d.banned_end; j += stride)
      work[batch.banned[j]] = -INFINITY;
    b.sync();
    // One thread per distinct token adds its biases in the request's order (float addition is not associative).
    for (int64_t j = d.bias_begin + first; j < d.bias_end; j += stride) {
      const int32_t t = batch.bias_token[j];
      if (j > d.bias_begin && batch.bias_token[j - 1] == t)
        continue;
      float x = work[t];
      for (int64_t k = j; k < d.bias_end && batch.bias_token[k] == t; ++k)
        x += batch.bias_value[k];
      work[t] = x;
    }
    b.sync();
    const bool repetition = d.repetition_penalty != 1.0f;
    for (int64_t j = d.penalty_begin + first; j < d.penalty_end; j += stride) {
      const int32_t t = batch.penalty_token[j], count = batch.penalty_count[j];
      float l = work[t];
      if (repetition)
        l = l > 0.0f ? div_rn(l, d.repetition_penalty) : mul_rn(l, d.repetition_penalty);
      if (count > 0) {
        l -= mul_rn(d.frequency_penalty, static_cast<float>(count));
        l -= d.presence_penalty;
      }
      work[t] = l;
    }
    b.sync();
  }
  auto value = [&](int64_t i) { return work != nullptr ? work[i] : sanitize(raw[i]); };

  // The argmax of the processed logits, lowest id on ties; 0 when every one is -inf.
  auto argmax = [&]() -> int64_t {
    float m = -INFINITY;
    for (int64_t i = first; i < n; i += stride)
      m = fmaxf(m, value(i));
    m = b.reduce(m, max_op{});
    int64_t at = n;
    for (int64_t i = first; i < n && at == n; i += stride)
      if (value(i) == m)
        at = i;
    at = b.reduce(at, min_op{});
    return at < n ? at : 0;
  };

  int64_t token = 0;
  bool degenerate = false;
  if (d.temperature < greedy_below) {
    token = argmax();
  } else {
    float m = -INFINITY;
    for (int64_t i = first; i < n; i += stride)
      m = fmaxf(m, value(i));
    m = fminf(b.reduce(m, max_op{}), FLT_MAX);
    const float temperature = d.temperature;
    // exp((logit - max) / T): subtracting first keeps tiny temperatures from overflowing; weights are proportional to
    // softmax(logit / T) and the max weighs 1.
    auto weight = [&](float v) { return expf(div_rn(fminf(v, FLT_MAX) - m, temperature)); };
    auto after_min_p = [&](float v) { return v > -INFINITY && (d.min_p <= 0.0f || weight(v) >= d.min_p); };
    double count = 0.0;
    for (int64_t i = first; i < n; i += stride)
      count += after_min_p(value(i)) ? 1.0 : 0.0;
    count = b.reduce(count, sum_op{});
    if (count == 0.0) {  // no finite logit (or min_p above 1): the CPU takes the argmax and draws nothing
      token = argmax();
      degenerate = true;
    } else {
      // top_k: keep the values at or above the k-th largest (ties stay).
      uint32_t k_threshold = 0;
      if (d.top_k > 0 && static_cast<double>(d.top_k) < count) {
        uint32_t lo = 0xffffffffu, hi = 0;
        for (int64_t i = first; i < n; i += stride) {
          const float v = value(i);
          if (after_min_p(v)) {
            const uint32_t o = order_bits(fminf(v, FLT_MAX));
            lo = lo < o ? lo : o;
            hi = hi < o ? o : hi;
          }
        }
        lo = b.reduce(lo, min_op{});
        hi = b.reduce(hi, max_op{});
        k_threshold = static_cast<uint32_t>(lowest_true(lo, hi, [&](uint64_t t) {
          double above = 0.0;
          for (int64_t i = first; i < n; i += stride) {
            const float v = value(i);
            above += after_min_p(v) && order_bits(fminf(v, FLT_MAX)) > t ? 1.0 : 0.0;
          }
          return b.reduce(above, sum_op{}) < static_cast<double>(d.top_k);
        }));
      }
      // 0 (no top_k) keeps everything: every value's image is above it.
      auto after_top_k = [&](float v) { return after_min_p(v) && order_bits(fminf(v, FLT_MAX)) >= k_threshold; };
      if (d.top_k > 0) {  // ties at the threshold may leave more than k
        count = 0.0;
        for (int64_t i = first; i < n; i += stride)
          count += after_top_k(value(i)) ? 1.0 : 0.0;
        count = b.reduce(count, sum_op{});
      }

      // top_p: in rank order, keep each token whose preceding mass is below top_p * total (the first always).
      uint64_t p_threshold = 0;
      if (d.top_p < 1.0f && count > 1.0) {
        double total = 0.0;
        uint64_t lo = ~uint64_t{0}, hi = 0;
        for (int64_t i = first; i < n; i += stride) {
          const float v = value(i);
          if (after_top_k(v)) {
            total += weight(v);
            const uint64_t k = rank_key(fminf(v, FLT_MAX), i, n);
            lo = lo < k ? lo : k;
            hi = hi < k ? k : hi;
          }
        }
        total = b.reduce(total, sum_op{});
        lo = b.reduce(lo, min_op{});
        hi = b.reduce(hi, max_op{});
        const double target = static_cast<double>(d.top_p) * total;
        p_threshold = lowest_true(lo, hi, [&](uint64_t t) {
          double above = 0.0;
          for (int64_t i = first; i < n; i += stride) {
            const float v = value(i);
            if (after_top_k(v) && rank_key(fminf(v, FLT_MAX), i, n) > t)
              above += weight(v);
          }
          return b.reduce(above, sum_op{}) < target;
        });
      }
      // 0 (no top_p) keeps everything, as above.
      auto survives = [&](float v, int64_t i) {
        return after_top_k(v) && rank_key(fminf(v, FLT_MAX), i, n) >= p_threshold;
      };

      // The draw: the first survivor in id order whose running total passes u * total.
      auto mass_up_to = [&](int64_t last) {
        double s = 0.0;
        for (int64_t i = first; i <= last; i += stride) {
          const float v = value(i);
          if (survives(v, i))
            s += weight(v);
        }
        return b.reduce(s, sum_op{});
      };
      const double total = mass_up_to(n - 1);
      const double target = d.u * total;
      if (total > target) {
        token = static_cast<int64_t>(lowest_true(
            0, static_cast<uint64_t>(n - 1), [&](uint64_t j) { return mass_up_to(static_cast<int64_t>(j)) > target; }));
      } else {
        // Rounding left u * total at or past the total: the last survivor with any weight, as the CPU does.
        int64_t last = -1;
        for (int64_t i = first; i < n; i += stride) {
          const float v = value(i);
          if (survives(v, i) && weight(v) > 0.0f)
            last = i;
        }
        last = b.reduce(last, max_op{});
        token = last >= 0 ? last : 0;
      }
    }
  }

  if (b.rank() == 0) {
    row_out o;
    o.token = static_cast<int32_t>(token);
    o.degenerate = degenerate ? 1 : 0;
    o.token_value = sanitize(raw[token]);
    o.raw_max = raw_max;
    o.raw_log_sum = raw_max == -INFINITY ? 0.0f : static_cast<float>(log(raw_sum));
    o.n_top = n_top;
    batch.out[row] = o;
  }
}

}  // namespace actorllm::cuda::sampling
