// Random sampling batches for the GPU sampler's tests (the host run in sampling_math_test.cpp, the kernel in
// sampling_gpu_test.cpp): every setting and logits processor, structured-output masks, ties, NaN/inf, all -inf rows and
// generators shared by rows; the reference is cpu::sample on each row in order; results compared as the contract
// asks (identical tokens and top-n ids, logprobs within float-sum tolerance).
#pragma once

#include "kernels/cpu/sampling.hpp"
#include "kernels/sampling.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace actorllm::sampling_test {

/// Rows of logits with everything cpu::sample reads, and which generator (seeded how) each row draws from.
struct sampling_batch {
  int64_t n_vocab = 0;
  std::vector<float> logits;  // [n_rows, n_vocab]
  std::vector<ops::sampling_params> params;
  std::vector<std::vector<int32_t>> prompt, output;
  std::vector<std::vector<uint64_t>> masks;  // per row; empty: no structured-output mask
  std::vector<size_t> rng_of;                // per row: its generator
  std::vector<uint64_t> seeds;               // per generator

  size_t n_rows() const { return params.size(); }
  std::vector<ops::sampler_rng> fresh_rngs() const {
    std::vector<ops::sampler_rng> r;
    for (uint64_t s : seeds)
      r.emplace_back(s);
    return r;
  }
  /// The rows over `rngs` (fresh_rngs()), borrowing this batch's vectors.
  std::vector<ops::sample_row> rows(std::vector<ops::sampler_rng>& rngs) const {
    std::vector<ops::sample_row> out(n_rows());
    for (size_t i = 0; i < n_rows(); ++i) {
      out[i].params = &params[i];
      out[i].prompt_ids = prompt[i];
      out[i].output_ids = output[i];
      out[i].rng = &rngs[rng_of[i]];
      out[i].allowed_mask = masks[i].empty() ? nullptr : masks[i].data();
    }
    return out;
  }
};

/// cpu::sample on each row of `b` in order, drawing from `rngs` (one per generator of the batch).
inline std::vector<ops::sample_result> cpu_sample_rows(const sampling_batch& b, std::vector<ops::sampler_rng>& rngs) {
  std::vector<ops::sample_result> out;
  for (size_t i = 0; i < b.n_rows(); ++i) {
    std::vector<float> row(b.logits.begin() + static_cast<ptrdiff_t>(i) * b.n_vocab,
                           b.logits.begin() + static_cast<ptrdiff_t>(i + 1) * b.n_vocab);
    out.push_back(cpu::sample(row.data(), b.n_vocab, b.params[i], b.prompt[i], b.output[i], rngs[b.rng_of[i]],
                              b.masks[i].empty() ? nullptr : b.masks[i].data()));
  }
  return out;
}

/// cpu::sample on each row in order, over fresh generators; `rngs` ends where the CPU leaves them.
struct reference_run {
  std::vector<ops::sample_result> results;
  std::vector<ops::sampler_rng> rngs;
};

inline reference_run reference(const sampling_batch& b) {
  reference_run r{{}, b.fresh_rngs()};
  r.results = cpu_sample_rows(b, r.rngs);
  return r;
}

/// Logprobs agree when both are the same infinity or within float-sum rounding.
inline bool logprob_close(float a, float b) {
  if (std::isinf(a) || std::isinf(b))
    return a == b;
  return std::fabs(a - b) <= 2e-5f * std::max(1.0f, std::fabs(b));
}

/// Identical tokens and top-n ids, logprobs close.
inline void compare_results(const sampling_batch& b, std::span<const ops::sample_result> got,
                            std::span<const ops::sample_result> expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CAPTURE(b.params[i].temperature);
    CAPTURE(b.params[i].top_k);
    CAPTURE(b.params[i].top_p);
    CAPTURE(b.params[i].min_p);
    CHECK(got[i].token == expected[i].token);
    CHECK_MESSAGE(logprob_close(got[i].logprob, expected[i].logprob), got[i].logprob << " vs " << expected[i].logprob);
    REQUIRE(got[i].top.size() == expected[i].top.size());
    for (size_t j = 0; j < got[i].top.size(); ++j) {
      CHECK(got[i].top[j].token == expected[i].top[j].token);
      CHECK(logprob_close(got[i].top[j].logprob, expected[i].top[j].logprob));
    }
  }
}

/// Every generator in the state the reference left it in. Compares states, drawing nothing: the GPU test's check once
/// drew from each generator under test, so the next step's rows drew one number later than the CPU's (issue 37).
inline void check_generators(std::span<const ops::sampler_rng> got, std::span<const ops::sampler_rng> expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t g = 0; g < got.size(); ++g) {
    CAPTURE(g);
    CHECK(got[g] == expected[g]);
  }
}

/// Successive steps as the engine runs them: the generators carry over from step to step and each row's token joins
/// its output (penalties, bad words and min_tokens move on). `sample(batch, rngs)` is the sampler under test over the
/// rows of `batch` with generators `rngs`; every step is checked against cpu::sample on each row in order, results
/// and generators.
template <class Sampler>
void check_successive_steps(sampling_batch batch, int n_steps, Sampler&& sample) {
  std::vector<ops::sampler_rng> rngs = batch.fresh_rngs(), cpu_rngs = batch.fresh_rngs();
  for (int step = 0; step < n_steps; ++step) {
    CAPTURE(step);
    const std::vector<ops::sample_result> expected = cpu_sample_rows(batch, cpu_rngs);
    const std::vector<ops::sample_result> got = sample(std::as_const(batch), rngs);
    compare_results(batch, got, expected);
    check_generators(rngs, cpu_rngs);
    for (size_t i = 0; i < batch.n_rows(); ++i)
      batch.output[i].push_back(expected[i].token);
  }
}

/// The probabilities cpu::sample draws with for a row: its processors and penalties applied, then softmax(l / T)
/// over cpu::sampling_support, in double.
inline std::vector<double> reference_probabilities(std::vector<float> logits, const ops::sampling_params& p,
                                                   std::span<const int32_t> prompt, std::span<const int32_t> output) {
  const auto n = static_cast<int64_t>(logits.size());
  cpu::apply_logits_processors(logits.data(), n, p, output);
  cpu::apply_penalties(logits.data(), n, p, prompt, output);
  const std::vector<int32_t> support = cpu::sampling_support(logits.data(), n, p);
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t t : support)
    m = std::max(m, static_cast<double>(logits[static_cast<size_t>(t)]));
  std::vector<double> prob(logits.size(), 0.0);
  double total = 0.0;
  for (int32_t t : support)
    total += prob[static_cast<size_t>(t)] = std::exp((logits[static_cast<size_t>(t)] - m) / p.temperature);
  for (double& x : prob)
    x /= total;
  return prob;
}

/// Wilson-Hilferty: the chi-square quantile of `df` degrees of freedom at the normal quantile z, accurate to a few
/// percent from df = 3, plenty for a threshold.
inline double chi_square_quantile(double df, double z) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

/// A goodness-of-fit test of token counts against probabilities.
struct chi_square {
  double statistic;
  double threshold;         // the statistic's 1 - 1e-6 quantile under the probabilities
  int64_t outside_support;  // draws of a token of probability 0
};

/// Pearson's statistic over the tokens of positive probability; cells expected below 5 are pooled (the usual validity
/// rule). The threshold's upper tail is 1e-6 (z = 4.75): with fixed seeds a test is deterministic, and a correct
/// sampler is far from it.
inline chi_square chi_square_of(const std::vector<int64_t>& hits, const std::vector<double>& prob) {
  double n_draws = 0.0;
  for (int64_t h : hits)
    n_draws += static_cast<double>(h);
  chi_square r{0.0, 0.0, 0};
  double pooled_expected = 0.0, pooled_observed = 0.0;
  int cells = 0;
  for (size_t t = 0; t < prob.size(); ++t) {
    const double expected = prob[t] * n_draws;
    if (prob[t] == 0.0) {
      r.outside_support += hits[t];
      continue;
    }
    if (expected < 5.0) {
      pooled_expected += expected;
      pooled_observed += static_cast<double>(hits[t]);
      continue;
    }
    const double d = static_cast<double>(hits[t]) - expected;
    r.statistic += d * d / expected;
    ++cells;
  }
  if (pooled_expected > 0.0) {
    const double d = pooled_observed - pooled_expected;
    r.statistic += d * d / pooled_expected;
    ++cells;
  }
  r.threshold = cells > 1 ? chi_square_quantile(cells - 1, 4.75) : 0.0;
  return r;
}

/// A batch of n_rows random rows over n_vocab tokens covering every setting and processor.
inline sampling_batch random_batch(std::mt19937_64& gen, int64_t n_vocab, size_t n_rows) {
  auto pick = [&](auto... options) {
    const std::vector<std::common_type_t<decltype(options)...>> v{options...};
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(gen)];
  };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(gen); };
  auto any_id = [&]() { return static_cast<int32_t>(std::uniform_int_distribution<int64_t>(-2, n_vocab + 1)(gen)); };
  auto id = [&]() { return static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, n_vocab - 1)(gen)); };
  std::normal_distribution<float> normal(0.0f, 3.0f);
  constexpr float inf = std::numeric_limits<float>::infinity();

  sampling_batch b;
  b.n_vocab = n_vocab;
  for (size_t r = 0; r < n_rows; ++r) {
    // Logits: continuous or on a coarse grid (ties), with NaN, +inf and -inf sprinkled in; now and then all -inf.
    const int mode = pick(0, 0, 1, 1, 2, 3);
    for (int64_t i = 0; i < n_vocab; ++i) {
      float v = normal(gen);
      if (mode == 1)
        v = std::round(v * 2.0f) / 2.0f;
      if (mode == 2) {
        const double u = std::uniform_real_distribution<double>(0.0, 1.0)(gen);
        v = u < 0.05 ? std::nanf("") : u < 0.08 ? inf : u < 0.2 ? -inf : std::round(v);
      }
      if (mode == 3 && chance(0.1))
        v = -inf;
      b.logits.push_back(v);
    }
    if (chance(0.04))
      std::fill(b.logits.end() - n_vocab, b.logits.end(), -inf);

    ops::sampling_params p;
    p.temperature = pick(0.0f, 0.0f, 0.05f, 0.5f, 1.0f, 1.0f, 1.7f);
    p.top_p = pick(1.0f, 1.0f, 0.9f, 0.5f, 0.1f);
    p.top_k = pick(0, 0, 1, 2, 5, 50);
    p.min_p = pick(0.0f, 0.0f, 0.05f, 0.3f);
    p.repetition_penalty = pick(1.0f, 1.0f, 1.2f, 0.8f);
    p.presence_penalty = pick(0.0f, 0.0f, 0.5f, -0.3f);
    p.frequency_penalty = pick(0.0f, 0.0f, 0.2f);
    p.logprobs = pick(-1, -1, 0, 1, 3, 20, static_cast<int>(n_vocab) + 5);

    std::vector<int32_t> prompt, output;
    for (int k = pick(0, 1, 4, 12); k > 0; --k)
      prompt.push_back(chance(0.1) ? any_id() : id());
    for (int k = pick(0, 1, 3, 9); k > 0; --k)
      output.push_back(chance(0.1) ? any_id() : id());

    if (chance(0.15))
      for (int k = pick(1, 3, 8); k > 0; --k)
        p.allowed_token_ids.push_back(chance(0.2) ? any_id() : id());
    if (chance(0.2)) {
      p.bad_words.push_back({id()});  // a single token: always banned
      if (!output.empty())            // ends with the output's last token: banned
        p.bad_words.push_back({output.back(), id()});
      p.bad_words.push_back({any_id(), any_id(), any_id()});
      p.bad_words.push_back({});
    }
    if (chance(0.2)) {
      p.min_tokens = static_cast<int32_t>(output.size()) + pick(0, 1);
      for (int k = pick(1, 2); k > 0; --k)
        p.min_tokens_stop_ids.push_back(chance(0.2) ? any_id() : id());
    }
    if (chance(0.25)) {
      for (int k = pick(1, 2, 5); k > 0; --k) {
        const int32_t t = chance(0.2) ? any_id() : id();
        p.logit_bias.emplace_back(t, std::uniform_real_distribution<float>(-5.0f, 5.0f)(gen));
        if (chance(0.3))  // the same token again: the biases add up in order
          p.logit_bias.emplace_back(t, std::uniform_real_distribution<float>(-5.0f, 5.0f)(gen));
      }
    }
    std::vector<uint64_t> mask;
    if (chance(0.15)) {
      mask.assign(static_cast<size_t>((n_vocab + 63) / 64), 0);
      const double density = pick(0.0, 0.1, 0.6, 0.6);
      for (int64_t i = 0; i < n_vocab; ++i)
        if (chance(density))
          mask[static_cast<size_t>(i / 64)] |= uint64_t{1} << (i % 64);
    }

    b.params.push_back(std::move(p));
    b.prompt.push_back(std::move(prompt));
    b.output.push_back(std::move(output));
    b.masks.push_back(std::move(mask));
    if (!b.seeds.empty() && chance(0.3)) {
      b.rng_of.push_back(b.seeds.size() - 1);  // shares the previous row's generator
    } else {
      b.rng_of.push_back(b.seeds.size());
      b.seeds.push_back(gen());
    }
  }
  return b;
}

}  // namespace actorllm::sampling_test
