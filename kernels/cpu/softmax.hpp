// Numerically stable softmax and log-softmax over one vector (vocabulary logits, attention rows).
#pragma once

#include <cstdint>

namespace actorllm::cpu {

/// Largest element of x[0 .. n) ignoring NaN; -inf for n == 0 or when every element is -inf or NaN.
float max_value(const float* x, int64_t n);

/// log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m = max_value; -inf when every element is -inf.
/// Elements are expected to be finite or -inf.
float log_sum_exp(const float* x, int64_t n);

/// log(sum(exp(x - m))) for a given shift m (normally max_value(x, n), which makes the sum >= 1). Callers that
/// need log-probabilities compute (x - m) - this, which keeps full precision near the maximum.
float log_sum_exp_shifted(const float* x, int64_t n, float m);

/// In place x = exp(x - max) / sum(exp(x - max)). Entries of -inf get 0. If every entry is -inf the result is
/// uniform (the distribution is otherwise undefined; this keeps callers NaN-free).
void softmax(float* x, int64_t n);

/// In place x = x - log_sum_exp(x). If every entry is -inf the result is uniform: -log(n).
void log_softmax(float* x, int64_t n);

}  // namespace actorllm::cpu
