// Token sampling. Candidate lists are kept in token-id order throughout (filters compact them stably; ranks are
// a total order on (logit, id)), so the draw is reproducible whatever the standard library's sort does.
#include "kernels/cpu/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/cpu/simd.hpp"
#include "kernels/cpu/softmax.hpp"
#include "util/check.hpp"

namespace actorllm::cpu {
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();
constexpr float max_finite = std::numeric_limits<float>::max();
constexpr float sampling_eps = sampling_params::greedy_below;

// "a ranks above b": larger value, then lower id.
inline bool ranks_above(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

// Index of the largest logit, lowest id on ties, NaN ignored; 0 when no logit is above -inf.
int32_t argmax(const float* x, int64_t n) {
  float m = max_value(x, n);
  for (int64_t i = 0; i < n; ++i)
    if (x[i] == m)
      return static_cast<int32_t>(i);
  return 0;
}

// Candidates of the random path, always in ascending token-id order.
struct candidates {
  std::vector<int32_t> id;
  std::vector<float> logit;   // after penalties
  std::vector<float> weight;  // exp((logit - max) / temperature), filled by compute_weights

  size_t size() const { return id.size(); }
  // Subtracting the max before dividing by the temperature keeps tiny temperatures from overflowing; the
  // weights are proportional to softmax(logit / temperature).
  void compute_weights(float m, float temperature) {
    weight.resize(logit.size());
    const int64_t n = static_cast<int64_t>(logit.size());
    constexpr int w = simd::width;
    simd::vf vm = simd::set1(m), vt = simd::set1(temperature);
    int64_t i = 0;
    for (; i + w <= n; i += w)
      simd::store(weight.data() + i, simd::exp(simd::div(simd::sub(simd::load(logit.data() + i), vm), vt)));
    for (; i < n; ++i)
      weight[static_cast<size_t>(i)] = simd::exp_scalar((logit[static_cast<size_t>(i)] - m) / temperature);
  }
  // Keeps the entries whose keep(i) is true, preserving order.
  template <class Keep>
  void filter(Keep keep) {
    size_t out = 0;
    for (size_t i = 0; i < id.size(); ++i) {
      if (keep(i)) {
        id[out] = id[i];
        logit[out] = logit[i];
        if (!weight.empty())
          weight[out] = weight[i];
        ++out;
      }
    }
    id.resize(out);
    logit.resize(out);
    if (!weight.empty())
      weight.resize(out);
  }
  float max_logit() const { return max_value(logit.data(), static_cast<int64_t>(logit.size())); }
};

// Applies repetition (prompt and output), frequency and presence (output) penalties in place; returns the
// original logits of the touched tokens.
std::vector<std::pair<int32_t, float>> penalise(float* logits, int64_t n_vocab, const sampling_params& p,
                                                std::span<const int32_t> prompt_ids,
                                                std::span<const int32_t> output_ids) {
  std::vector<std::pair<int32_t, float>> originals;
  bool repetition = p.repetition_penalty != 1.0f;
  bool additive = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (!repetition && !additive)
    return originals;
  thread_local std::vector<int32_t> counts;  // output occurrences per token; all zero between calls
  thread_local std::vector<uint8_t> seen;    // token already penalised in this call; all zero between calls
  if (static_cast<int64_t>(counts.size()) < n_vocab) {
    counts.resize(static_cast<size_t>(n_vocab), 0);
    seen.resize(static_cast<size_t>(n_vocab), 0);
  }
  auto valid = [&](int32_t t) { return t >= 0 && t < n_vocab; };
  for (int32_t t : output_ids)
    if (valid(t))
      ++counts[static_cast<size_t>(t)];
  auto apply = [&](int32_t t) {
    if (!valid(t) || seen[static_cast<size_t>(t)])
      return;
    seen[static_cast<size_t>(t)] = 1;
    float l = logits[t];
    originals.emplace_back(t, l);
    if (repetition)
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    int32_t c = counts[static_cast<size_t>(t)];
    if (c > 0) {
      l -= p.frequency_penalty * static_cast<float>(c);
      l -= p.presence_penalty;
    }
    logits[t] = l;
  };
  // Presence and frequency apply only to output tokens, which apply() sees through counts; prompt tokens
  // only get the repetition penalty.
  for (int32_t t : output_ids)
    apply(t);
  if (repetition)
    for (int32_t t : prompt_ids)
      apply(t);
  for (auto [t, l] : originals) {
    counts[static_cast<size_t>(t)] = 0;
    seen[static_cast<size_t>(t)] = 0;
  }
  return originals;
}

// Candidates binned by d = (max - logit) / T, which is monotonic in rank (bin 0 holds the best): top-k and top-p
// decide whole bins by their count or mass and sort only the one bin where the cut falls. Sorting a flat
// 128k-token distribution instead would cost milliseconds per token.
struct rank_bins {
  static constexpr int n_bins = 512;
  static constexpr float bins_per_unit = 8.0f;  // bin width 1/8 in log-weight: the last bin starts at e^-63.9
  std::vector<uint16_t> bin;                    // per candidate
  int64_t count[n_bins];
  double mass[n_bins];

  void build(const candidates& c, float m, float temperature) {
    const size_t n = c.size();
    bin.resize(n);
    std::fill(std::begin(count), std::end(count), 0);
    std::fill(std::begin(mass), std::end(mass), 0.0);
    for (size_t i = 0; i < n; ++i) {
      float d = (m - c.logit[i]) / temperature * bins_per_unit;
      auto b = static_cast<uint16_t>(std::min(d, static_cast<float>(n_bins - 1)));
      bin[i] = b;
      ++count[b];
      if (!c.weight.empty())
        mass[b] += c.weight[i];
    }
  }
  // Candidate indices of bin b, best first.
  std::vector<uint32_t> sorted_bin(const candidates& c, int b) const {
    std::vector<uint32_t> idx;
    for (size_t i = 0; i < bin.size(); ++i)
      if (bin[i] == b)
        idx.push_back(static_cast<uint32_t>(i));
    std::sort(idx.begin(), idx.end(),
              [&](uint32_t x, uint32_t y) { return ranks_above(c.logit[x], c.id[x], c.logit[y], c.id[y]); });
    return idx;
  }
};

// Keeps the candidates whose logit is at least the k-th largest (ties at the threshold stay, as in vLLM).
void apply_top_k(candidates& c, int64_t k, float m, float temperature, rank_bins& bins) {
  bins.build(c, m, temperature);
  int64_t before = 0;
  int cut = 0;
  while (cut < rank_bins::n_bins - 1 && before + bins.count[cut] < k)
    before += bins.count[cut++];
  std::vector<uint32_t> in_cut = bins.sorted_bin(c, cut);
  const float threshold = c.logit[in_cut[static_cast<size_t>(k - before - 1)]];
  c.filter([&](size_t i) { return c.logit[i] >= threshold; });
}

// Keeps the smallest prefix of candidates, in rank order, whose probability before it is below top_p: vLLM's
// rule (drop the ascending-sorted tail whose cumulative probability is <= 1 - top_p, never the top token).
void apply_top_p(candidates& c, float top_p, float m, float temperature, rank_bins& bins) {
  bins.build(c, m, temperature);
  double total = 0;
  for (double x : bins.mass)
    total += x;
  const double target = static_cast<double>(top_p) * total;
  // The bin holding the first token whose preceding mass reaches the target; everything before it is kept.
  double before = 0;
  int cut = 0;
  while (cut < rank_bins::n_bins - 1 && before + bins.mass[cut] < target)
    before += bins.mass[cut++];
  std::vector<uint32_t> in_cut = bins.sorted_bin(c, cut);
  size_t kept_in_cut = 0;
  for (uint32_t i : in_cut) {
    if (before >= target && (cut > 0 || kept_in_cut > 0))
      break;
    before += c.weight[i];
    ++kept_in_cut;
  }
  thread_local std::vector<uint8_t> keep_cut;
  keep_cut.assign(c.size(), 0);
  for (size_t k = 0; k < kept_in_cut; ++k)
    keep_cut[in_cut[k]] = 1;
  c.filter([&](size_t i) { return bins.bin[i] < cut || keep_cut[i] != 0; });
}

// The candidates a draw chooses from, in token-id order with their weights: finite logits (+inf clamped), then
// min_p, top_k and top_p. Empty only when no logit is finite or min_p > 1. Per-thread storage, valid until the
// next call.
candidates& filtered_candidates(const float* logits, int64_t n_vocab, const sampling_params& params) {
  thread_local candidates c;
  thread_local rank_bins bins;
  c.id.clear();
  c.logit.clear();
  c.weight.clear();
  for (int64_t i = 0; i < n_vocab; ++i) {
    if (logits[i] > neg_inf) {  // false for NaN too
      c.id.push_back(static_cast<int32_t>(i));
      c.logit.push_back(std::min(logits[i], max_finite));
    }
  }
  if (c.size() == 0)
    return c;
  const float m = c.max_logit();
  if (params.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  exp((l_i - l_max) / T) >= min_p (the partition function cancels).
    c.compute_weights(m, params.temperature);
    const float min_p = params.min_p;
    c.filter([&](size_t i) { return c.weight[i] >= min_p; });
  }
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < c.size())
    apply_top_k(c, params.top_k, m, params.temperature, bins);
  if (c.weight.size() != c.size() || c.weight.empty())
    c.compute_weights(m, params.temperature);
  if (params.top_p < 1.0f && c.size() > 1)
    apply_top_p(c, params.top_p, m, params.temperature, bins);
  return c;
}

}  // namespace

void apply_logits_processors(float* logits, int64_t n_vocab, const sampling_params& params,
                             std::span<const int32_t> output_ids) {
  auto valid = [&](int32_t t) { return t >= 0 && t < n_vocab; };
  if (!params.allowed_token_ids.empty()) {
    thread_local std::vector<float> kept;
    kept.clear();
    for (int32_t t : params.allowed_token_ids)
      kept.push_back(valid(t) ? logits[t] : neg_inf);
    std::fill(logits, logits + n_vocab, neg_inf);
    for (size_t i = 0; i < kept.size(); ++i)
      if (valid(params.allowed_token_ids[i]))
        logits[params.allowed_token_ids[i]] = kept[i];
  }
  for (const std::vector<int32_t>& word : params.bad_words) {
    if (word.empty() || !valid(word.back()))
      continue;
    const size_t prefix = word.size() - 1;
    if (prefix > output_ids.size())
      continue;
    if (std::equal(word.begin(), word.end() - 1, output_ids.end() - static_cast<std::ptrdiff_t>(prefix)))
      logits[word.back()] = neg_inf;
  }
  if (output_ids.size() < static_cast<size_t>(std::max(params.min_tokens, 0)))
    for (int32_t t : params.min_tokens_stop_ids)
      if (valid(t))
        logits[t] = neg_inf;
  for (auto [t, bias] : params.logit_bias)
    if (valid(t))
      logits[t] += bias;
}

std::vector<int32_t> sampling_support(const float* logits, int64_t n_vocab, const sampling_params& params) {
  if (params.temperature < sampling_eps) {
    std::vector<float> x(logits, logits + n_vocab);
    for (float& v : x)
      v = std::isnan(v) ? neg_inf : v;
    return {argmax(x.data(), n_vocab)};
  }
  const candidates& c = filtered_candidates(logits, n_vocab, params);
  return c.id;
}

void apply_penalties(float* logits, int64_t n_vocab, const sampling_params& params, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids) {
  penalise(logits, n_vocab, params, prompt_ids, output_ids);
}

sample_result sample(float* logits, int64_t n_vocab, const sampling_params& params, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids, sampler_rng& rng, const uint64_t* allowed_mask) {
  ACTORLLM_CHECK(n_vocab > 0, "sample: empty vocabulary");
  sample_result result{0, 0.0f, {}};

  // NaN means "never": -inf. +inf would turn every exp(x - max) into NaN: the largest finite value gives the
  // intended result (all mass on those tokens).
  for (int64_t i = 0; i < n_vocab; ++i) {
    float v = logits[i];
    logits[i] = std::isnan(v) ? neg_inf : std::min(v, max_finite);
  }

  // Raw statistics first: logprobs describe the model's distribution, not the processed one.
  const float raw_max = max_value(logits, n_vocab);
  const float raw_ls = raw_max == neg_inf ? 0.0f : log_sum_exp_shifted(logits, n_vocab, raw_max);
  if (params.logprobs > 0)
    result.top = ops::top_logprobs(logits, n_vocab, params.logprobs, raw_max, raw_ls);

  // Processors change logits beyond what penalise() records; the raw row is kept for the sampled token's logprob.
  const bool processed = allowed_mask != nullptr || params.has_logits_processors(output_ids.size());
  thread_local std::vector<float> raw_row;
  if (processed) {
    raw_row.assign(logits, logits + n_vocab);
    if (allowed_mask != nullptr)
      for (int64_t i = 0; i < n_vocab; ++i)
        if (((allowed_mask[i / 64] >> (i % 64)) & 1) == 0)
          logits[i] = neg_inf;
    apply_logits_processors(logits, n_vocab, params, output_ids);
  }
  auto originals = penalise(logits, n_vocab, params, prompt_ids, output_ids);

  if (params.temperature < sampling_eps) {
    result.token = argmax(logits, n_vocab);
  } else {
    candidates& c = filtered_candidates(logits, n_vocab, params);
    if (c.size() == 0) {
      result.token = argmax(logits, n_vocab);
    } else {
      double total = 0;
      for (float w : c.weight)
        total += w;
      double u = rng.uniform() * total;
      size_t pick = c.size() - 1;
      double acc = 0;
      for (size_t i = 0; i < c.size(); ++i) {
        acc += c.weight[i];
        if (u < acc) {
          pick = i;
          break;
        }
      }
      // Rounding can leave u just past the last partial sum: take the last candidate with any weight.
      while (pick > 0 && c.weight[pick] == 0.0f)
        --pick;
      result.token = c.id[pick];
    }
  }

  float raw = logits[result.token];
  for (auto [t, l] : originals)
    if (t == result.token)
      raw = l;
  if (processed)
    raw = raw_row[static_cast<size_t>(result.token)];
  result.logprob = raw_max == neg_inf ? -std::log(static_cast<float>(n_vocab)) : (raw - raw_max) - raw_ls;
  return result;
}

}  // namespace actorllm::cpu
