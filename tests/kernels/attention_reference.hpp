// The float64 reference of the attention tests: causal softmax attention of one query head over a sequence's dense
// keys and values, with the kernels' sliding-window rule.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace actorllm::test {

/// out[0 .. head_dim) = softmax over j in [first, pos] of (q . k_j * scale) weighting v_j, first = max(0, pos -
/// window + 1) (window <= 0: 0). k and v are a sequence's dense rows [context][n_head_kv][head_dim]; the head reads
/// kv head `kv_head`.
inline void reference_attention(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                                int64_t n_head_kv, int64_t kv_head, int64_t head_dim, int64_t pos, int64_t window,
                                double scale, double* out) {
  const int64_t first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  auto at = [&](int64_t j, int64_t i) { return static_cast<size_t>((j * n_head_kv + kv_head) * head_dim + i); };
  std::vector<double> w(static_cast<size_t>(pos + 1 - first));
  double m = -INFINITY;
  for (int64_t j = first; j <= pos; ++j) {
    double dot = 0;
    for (int64_t i = 0; i < head_dim; ++i)
      dot += static_cast<double>(q[i]) * k[at(j, i)];
    w[static_cast<size_t>(j - first)] = dot * scale;
    m = std::max(m, dot * scale);
  }
  double sum = 0;
  for (double& x : w)
    sum += (x = std::exp(x - m));
  for (int64_t i = 0; i < head_dim; ++i) {
    double acc = 0;
    for (int64_t j = first; j <= pos; ++j)
      acc += w[static_cast<size_t>(j - first)] * v[at(j, i)];
    out[i] = acc / sum;
  }
}

/// How far attention computed with 16-bit operands may land from reference_attention's value at one row and head:
/// the CUDA tensor-core prefill kernel rounds q and the softmax weights to bf16 (f16 for an f16 cache) before its
/// MMAs. q's rounding (relative 2^-9 per element) moves each score by at most 2^-9 * scale * sum_i |q_i k_i|, so a
/// weight moves by at most a factor exp(2 * that) once normalised; rounding the weight adds 2^-9, its normalising sum
/// as much again. The output, a weighted mean of v, moves by at most that relative change times max |v| over the row's
/// keys.
inline double sixteen_bit_operand_bound(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                                        int64_t n_head_kv, int64_t kv_head, int64_t head_dim, int64_t pos,
                                        int64_t window, double scale) {
  const int64_t first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  auto at = [&](int64_t j, int64_t i) { return static_cast<size_t>((j * n_head_kv + kv_head) * head_dim + i); };
  double most_dot = 0, most_v = 0;
  for (int64_t j = first; j <= pos; ++j) {
    double dot = 0;
    for (int64_t i = 0; i < head_dim; ++i) {
      dot += std::fabs(static_cast<double>(q[i]) * k[at(j, i)]);
      most_v = std::max(most_v, std::fabs(static_cast<double>(v[at(j, i)])));
    }
    most_dot = std::max(most_dot, dot);
  }
  const double half_ulp = std::ldexp(1.0, -9);
  return (std::expm1(2 * half_ulp * scale * most_dot) + 2 * half_ulp) * most_v;
}

}  // namespace actorllm::test
