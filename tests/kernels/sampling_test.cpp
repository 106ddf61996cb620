// Sampling: the generator's known outputs and reproducibility, greedy, the support and frequencies under
// temperature / min_p / top_k / top_p, vLLM's penalties (exact values), raw logprobs and top-n against float64
// log_softmax, and edge cases.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/sampling.hpp"

using namespace actorllm;
using cpu::sample;
using cpu::sampler_rng;
using cpu::sampling_params;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

std::vector<double> ref_log_softmax(const std::vector<float>& x) {
  double m = -INFINITY;
  for (float v : x)
    m = std::max(m, static_cast<double>(v));
  double s = 0;
  for (float v : x)
    s += std::exp(static_cast<double>(v) - m);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = static_cast<double>(x[i]) - m - std::log(s);
  return out;
}

// Draws `n` tokens with fresh copies of `logits` and returns how often each token came up.
std::map<int32_t, int> histogram(const std::vector<float>& logits, const sampling_params& p, int n, uint64_t seed) {
  sampler_rng rng(seed);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) {
    auto scratch = logits;
    ++h[sample(scratch.data(), static_cast<int64_t>(scratch.size()), p, {}, {}, rng).token];
  }
  return h;
}

// got == ref for -inf, else within a relative 1e-6.
bool logprob_close(float got, double ref) {
  if (std::isinf(ref))
    return got == static_cast<float>(ref);
  return std::fabs(got - ref) <= 1e-6 * std::fabs(ref) + 1e-6;
}

// Logits whose softmax is exactly `probs` (up to float rounding).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs)
    l.push_back(p > 0 ? static_cast<float>(std::log(p)) : -inf);
  return l;
}

}  // namespace

TEST_CASE("sampler_rng is xoshiro256** seeded by splitmix64 [asan]") {
  // Known answers from an independent transcription of the reference algorithms.
  sampler_rng a(0);
  CHECK(a.next() == 0x99ec5f36cb75f2b4ull);
  CHECK(a.next() == 0xbf6e1f784956452aull);
  CHECK(a.next() == 0x1a5f849d4933e6e0ull);
  CHECK(a.next() == 0x6aa594f1262d2d2cull);
  sampler_rng b(42);
  CHECK(b.next() == 0x15780b2e0c2ec716ull);
  sampler_rng c(42);
  CHECK(c.uniform() == doctest::Approx(0.08386297105988216).epsilon(1e-15));
  CHECK(c.uniform() == doctest::Approx(0.3789802506626686).epsilon(1e-15));
  sampler_rng d(7);
  for (int i = 0; i < 100000; ++i) {
    double u = d.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
  }
}

TEST_CASE("greedy sampling is the argmax after penalties, lowest id on ties, and draws nothing [asan]") {
  auto logits = test::random_floats(1000, 11, -5.0f, 5.0f);
  logits[417] = 9.0f;
  logits[903] = 9.0f;  // tie: the lower id wins
  sampling_params p;
  p.temperature = 0.0f;
  sampler_rng rng(5), untouched(5);
  auto scratch = logits;
  auto r = sample(scratch.data(), 1000, p, {}, {}, rng);
  CHECK(r.token == 417);
  CHECK(rng.next() == untouched.next());  // greedy consumes no randomness

  // A repetition penalty on 417 (prompt) hands the win to 903.
  p.repetition_penalty = 1.5f;
  std::vector<int32_t> prompt = {417};
  scratch = logits;
  CHECK(sample(scratch.data(), 1000, p, prompt, {}, rng).token == 903);
  // Top-k/top-p/min_p do not change greedy.
  p.top_k = 3;
  p.top_p = 0.1f;
  p.min_p = 0.9f;
  scratch = logits;
  CHECK(sample(scratch.data(), 1000, p, prompt, {}, rng).token == 903);
}

TEST_CASE("the same seed gives the same tokens, another seed other tokens [asan]") {
  auto logits = test::random_floats(500, 12, -2.0f, 2.0f);
  sampling_params p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  p.top_k = 100;
  auto run = [&](uint64_t seed) {
    sampler_rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) {
      auto scratch = logits;
      out.push_back(sample(scratch.data(), 500, p, {}, out, rng).token);
    }
    return out;
  };
  CHECK(run(1234) == run(1234));
  CHECK(run(1234) != run(1235));
}

TEST_CASE("temperature sampling follows softmax(logits / T) [asan]") {
  std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f};
  for (float t : {1.0f, 0.5f, 2.0f}) {
    sampling_params p;
    p.temperature = t;
    const int n = 20000;
    auto h = histogram(logits, p, n, 99);
    double z = 0;
    for (float l : logits)
      z += std::exp(l / t);
    for (int32_t tok = 0; tok < 4; ++tok) {
      double want = std::exp(logits[static_cast<size_t>(tok)] / t) / z;
      double got = static_cast<double>(h[tok]) / n;
      INFO("T " << t << " token " << tok);
      CHECK(std::fabs(got - want) < 0.02);  // ~6 standard deviations at n = 20000
    }
  }
}

TEST_CASE("top_k, top_p and min_p restrict the support exactly [asan]") {
  // probabilities 0.5, 0.3, 0.15, 0.05 at token ids 3, 0, 2, 1
  auto logits = logits_of({0.3, 0.05, 0.15, 0.5});
  auto support = [&](const sampling_params& p) {
    std::set<int32_t> s;
    for (auto [tok, count] : histogram(logits, p, 4000, 3))
      s.insert(tok);
    return s;
  };
  sampling_params p;
  CHECK(support(p) == std::set<int32_t>{0, 1, 2, 3});
  p.top_k = 2;
  CHECK(support(p) == std::set<int32_t>{3, 0});
  p.top_k = 1;
  CHECK(support(p) == std::set<int32_t>{3});
  p.top_k = 100;  // more than the vocabulary: no restriction
  CHECK(support(p) == std::set<int32_t>{0, 1, 2, 3});

  p = {};
  p.top_p = 0.75f;  // 0.5 before token 0 < 0.75 keeps it; 0.8 before token 2 does not
  CHECK(support(p) == std::set<int32_t>{3, 0});
  p.top_p = 0.85f;
  CHECK(support(p) == std::set<int32_t>{3, 0, 2});
  p.top_p = 1e-6f;  // always keeps the most likely token
  CHECK(support(p) == std::set<int32_t>{3});

  p = {};
  p.min_p = 0.2f;  // threshold 0.1
  CHECK(support(p) == std::set<int32_t>{3, 0, 2});
  p.min_p = 0.5f;  // threshold 0.25
  CHECK(support(p) == std::set<int32_t>{3, 0});
  p.min_p = 1.0f;
  CHECK(support(p) == std::set<int32_t>{3});

  // Order min_p -> top_k -> top_p; each renormalises over the survivors of the previous one.
  p = {};
  p.min_p = 0.2f;  // {3, 0, 2}: renormalised 0.526, 0.316, 0.158
  p.top_p = 0.6f;  // 0.526 before token 0 < 0.6: {3, 0}
  CHECK(support(p) == std::set<int32_t>{3, 0});
}

TEST_CASE("top_p renormalises the kept mass [asan]") {
  auto logits = logits_of({0.3, 0.05, 0.15, 0.5});
  sampling_params p;
  p.top_p = 0.75f;
  const int n = 20000;
  auto h = histogram(logits, p, n, 8);
  CHECK(std::fabs(static_cast<double>(h[3]) / n - 0.5 / 0.8) < 0.02);
  CHECK(std::fabs(static_cast<double>(h[0]) / n - 0.3 / 0.8) < 0.02);
}

TEST_CASE("top_k keeps ties at the threshold, on a large vocabulary [asan]") {
  std::vector<float> logits(50000, -3.0f);
  logits[100] = 5.0f;
  logits[200] = 4.0f;
  logits[300] = 4.0f;  // tied with 200 at the k = 2 threshold
  sampling_params p;
  p.top_k = 2;
  p.temperature = 0.7f;
  std::set<int32_t> s;
  for (auto [tok, c] : histogram(logits, p, 400, 4))
    s.insert(tok);
  CHECK(s == std::set<int32_t>{100, 200, 300});
}

TEST_CASE("penalties change logits exactly as vLLM does [asan]") {
  std::vector<float> logits = {2.0f, -1.0f, 3.0f, 0.5f, -2.0f, 1.0f};
  std::vector<int32_t> prompt = {0, 1, 1, 99};  // 99: out of range, ignored
  std::vector<int32_t> output = {3, 4, 4, 4, -7};
  sampling_params p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  auto x = logits;
  cpu::apply_penalties(x.data(), 6, p, prompt, output);
  CHECK(x[0] == 1.0f);                  // prompt: 2 / 2
  CHECK(x[1] == -2.0f);                 // prompt: -1 * 2
  CHECK(x[2] == 3.0f);                  // untouched
  CHECK(x[3] == 0.25f - 0.25f - 0.5f);  // output once: 0.5 / 2 - 0.25 * 1 - 0.5
  CHECK(x[4] == -4.0f - 0.75f - 0.5f);  // output thrice: -2 * 2 - 0.25 * 3 - 0.5
  CHECK(x[5] == 1.0f);

  // Presence/frequency never touch prompt-only tokens; no repetition penalty leaves the prompt alone.
  sampling_params q;
  q.presence_penalty = 1.0f;
  q.frequency_penalty = 1.0f;
  x = logits;
  cpu::apply_penalties(x.data(), 6, q, prompt, output);
  CHECK(x[0] == 2.0f);
  CHECK(x[1] == -1.0f);
  CHECK(x[3] == 0.5f - 2.0f);
  CHECK(x[4] == -2.0f - 3.0f - 1.0f);

  // Repeated calls see fresh counts (the scratch state is reset).
  x = logits;
  cpu::apply_penalties(x.data(), 6, q, {}, std::vector<int32_t>{5});
  CHECK(x[4] == -2.0f);
  CHECK(x[5] == 1.0f - 2.0f);
}

TEST_CASE("logprobs and top-n come from the raw logits [asan]") {
  for (int64_t n_vocab : {1, 5, 37, 1000}) {
    auto logits = test::random_floats(static_cast<size_t>(n_vocab), 20 + n_vocab, -8.0f, 8.0f);
    if (n_vocab >= 5) {
      logits[1] = logits[4];  // a tie: lower id first in top-n
      logits[2] = -inf;
    }
    auto ref = ref_log_softmax(logits);
    sampling_params p;
    p.logprobs = 5;
    p.temperature = 0.7f;
    p.repetition_penalty = 1.3f;  // processed logits differ from the raw ones
    p.top_k = 3;
    sampler_rng rng(17);
    std::vector<int32_t> output = {0};
    for (int trial = 0; trial < 20; ++trial) {
      auto scratch = logits;
      auto r = sample(scratch.data(), n_vocab, p, {}, output, rng);
      REQUIRE(r.token >= 0);
      REQUIRE(r.token < n_vocab);
      CHECK(logprob_close(r.logprob, ref[static_cast<size_t>(r.token)]));
      REQUIRE(r.top.size() == static_cast<size_t>(std::min<int64_t>(5, n_vocab)));
      std::vector<int32_t> order(static_cast<size_t>(n_vocab));
      for (int32_t i = 0; i < n_vocab; ++i)
        order[static_cast<size_t>(i)] = i;
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
      });
      for (size_t k = 0; k < r.top.size(); ++k) {
        CHECK(r.top[k].token == order[k]);
        CHECK(logprob_close(r.top[k].logprob, ref[static_cast<size_t>(order[k])]));
      }
    }
  }
  // logprobs = 0: the sampled token's logprob only.
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  sampling_params p;
  p.logprobs = 0;
  p.temperature = 0.0f;
  sampler_rng rng(1);
  auto r = sample(logits.data(), 3, p, {}, {}, rng);
  CHECK(r.token == 2);
  CHECK(r.top.empty());
  CHECK(r.logprob == doctest::Approx(ref_log_softmax({1.0f, 2.0f, 3.0f})[2]).epsilon(1e-6));
}

TEST_CASE("sampling edge cases stay NaN-free [asan]") {
  sampler_rng rng(3);
  sampling_params p;
  p.logprobs = 3;
  {  // all -inf but one: always that one, logprob 0
    std::vector<float> logits(100, -inf);
    logits[42] = -3.0f;
    for (float t : {0.0f, 0.5f, 1.0f}) {
      p.temperature = t;
      auto x = logits;
      auto r = sample(x.data(), 100, p, {}, {}, rng);
      CHECK(r.token == 42);
      CHECK(r.logprob == 0.0f);
      CHECK(r.top[0].token == 42);
      CHECK(r.top[1].logprob == -inf);
    }
  }
  {  // NaN logits are never sampled; +inf takes all the mass
    std::vector<float> logits = {std::nanf(""), 1.0f, inf, 2.0f, std::nanf("")};
    p.temperature = 1.0f;
    for (int i = 0; i < 50; ++i) {
      auto x = logits;
      auto r = sample(x.data(), 5, p, {}, {}, rng);
      CHECK(r.token == 2);
      CHECK_FALSE(std::isnan(r.logprob));
      for (auto tl : r.top)
        CHECK_FALSE(std::isnan(tl.logprob));
    }
  }
  {  // every logit -inf: token 0, a uniform logprob, no NaN
    std::vector<float> logits(8, -inf);
    auto r = sample(logits.data(), 8, p, {}, {}, rng);
    CHECK(r.token == 0);
    CHECK(r.logprob == doctest::Approx(-std::log(8.0)));
  }
  {  // a one-token vocabulary; huge logits; tiny temperature just above the greedy cut-off
    std::vector<float> one = {7.0f};
    CHECK(sample(one.data(), 1, p, {}, {}, rng).token == 0);
    std::vector<float> big = {3e38f, -3e38f, 2.9e38f};
    p.temperature = 2e-5f;
    auto r = sample(big.data(), 3, p, {}, {}, rng);
    CHECK(r.token == 0);
    CHECK_FALSE(std::isnan(r.logprob));
  }
}

TEST_CASE("sampling_support equals a brute-force sort on large vocabularies [asan]") {
  struct config {
    float temperature, top_p, min_p;
    int32_t top_k;
  };
  const std::vector<config> configs = {
      {0.7f, 0.9f, 0.0f, 0},    {1.3f, 1.0f, 0.0f, 37}, {1.0f, 0.5f, 0.0f, 200}, {0.5f, 0.95f, 0.01f, 0},
      {1.0f, 0.999f, 0.0f, 0},  {2.0f, 0.3f, 0.0f, 0},  {0.05f, 0.8f, 0.0f, 0},  {1.0f, 1.0f, 0.2f, 3000},
      {1.0f, 0.9f, 0.0f, 5000}, {1.0f, 1e-7f, 0.0f, 0},
  };
  uint64_t seed = 900;
  for (int64_t n_vocab : {3000, 20000}) {
    for (const auto& cfg : configs) {
      auto logits = test::random_floats(static_cast<size_t>(n_vocab), ++seed, -10.0f, 10.0f);
      for (size_t i = 0; i < 40; ++i)  // ties, and a few impossible tokens
        logits[i * 7] = logits[i * 7 + 1];
      logits[5] = -inf;
      sampling_params p;
      p.temperature = cfg.temperature;
      p.top_p = cfg.top_p;
      p.top_k = cfg.top_k;
      p.min_p = cfg.min_p;
      auto support = cpu::sampling_support(logits.data(), n_vocab, p);

      // Brute force in double: rank all finite tokens, then min_p, top_k, top_p. Tokens within rounding of a
      // threshold are "ambiguous" and may fall either way.
      std::vector<int32_t> order;
      for (int32_t i = 0; i < n_vocab; ++i)
        if (logits[static_cast<size_t>(i)] > -inf)
          order.push_back(i);
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
        return la > lb || (la == lb && a < b);
      });
      const double m = logits[static_cast<size_t>(order[0])];
      auto weight = [&](int32_t t) { return std::exp((logits[static_cast<size_t>(t)] - m) / cfg.temperature); };
      std::set<int32_t> ambiguous;
      std::vector<int32_t> kept;
      for (int32_t t : order) {
        double w = weight(t);
        if (std::fabs(w - cfg.min_p) <= 1e-5 * cfg.min_p)
          ambiguous.insert(t);
        if (w >= cfg.min_p)
          kept.push_back(t);
      }
      if (cfg.top_k > 0 && static_cast<size_t>(cfg.top_k) < kept.size()) {
        float threshold = logits[static_cast<size_t>(kept[static_cast<size_t>(cfg.top_k - 1)])];
        std::erase_if(kept, [&](int32_t t) { return logits[static_cast<size_t>(t)] < threshold; });
      }
      if (cfg.top_p < 1.0f) {
        double total = 0;
        for (int32_t t : kept)
          total += weight(t);
        double target = cfg.top_p * total, before = 0;
        size_t n_keep = 0;
        for (int32_t t : kept) {
          if (n_keep > 0 && before >= target)
            break;
          if (std::fabs(before - target) <= 1e-5 * total)
            ambiguous.insert(t);
          before += weight(t);
          ++n_keep;
        }
        if (n_keep < kept.size() && std::fabs(before - target) <= 1e-5 * total)
          ambiguous.insert(kept[n_keep]);
        kept.resize(n_keep);
      }
      std::set<int32_t> want(kept.begin(), kept.end()), got(support.begin(), support.end());
      INFO("n_vocab " << n_vocab << " T " << cfg.temperature << " top_p " << cfg.top_p << " top_k " << cfg.top_k
                      << " min_p " << cfg.min_p << " want " << want.size() << " got " << got.size());
      CHECK(std::is_sorted(support.begin(), support.end()));
      for (int32_t t : got)
        CHECK((want.count(t) == 1 || ambiguous.count(t) == 1));
      for (int32_t t : want)
        CHECK((got.count(t) == 1 || ambiguous.count(t) == 1));
    }
  }
}

TEST_CASE("logits processors: allowed_token_ids, bad_words, min_tokens and logit_bias, with raw logprobs [asan]") {
  const std::vector<float> base{2.0f, 1.0f, 0.5f, 3.0f, -1.0f, 0.0f};
  const int64_t n = static_cast<int64_t>(base.size());
  const std::vector<double> ref = ref_log_softmax(base);
  auto draw = [&](const sampling_params& p, std::span<const int32_t> out, uint64_t seed) {
    std::vector<float> x = base;
    sampler_rng rng{seed};
    return sample(x.data(), n, p, {}, out, rng);
  };
  SUBCASE("allowed_token_ids: only those are drawn, logprobs stay the raw ones") {
    sampling_params p;
    p.allowed_token_ids = {1, 4};
    std::set<int32_t> seen;
    for (uint64_t s = 0; s < 200; ++s) {
      auto r = draw(p, {}, s);
      seen.insert(r.token);
      CHECK(r.logprob == doctest::Approx(ref[static_cast<size_t>(r.token)]).epsilon(1e-5));
    }
    CHECK(seen == std::set<int32_t>{1, 4});
    p.temperature = 0;
    CHECK(draw(p, {}, 0).token == 1);  // the argmax of the allowed ones
  }
  SUBCASE("bad_words: a single-token word never comes; a two-token word's last token only after its first") {
    sampling_params p;
    p.temperature = 0;
    p.bad_words = {{3}};
    CHECK(draw(p, {}, 0).token == 0);  // 3 (the argmax) is banned
    p.bad_words = {{5, 3}};
    CHECK(draw(p, {}, 0).token == 3);
    const std::vector<int32_t> after_5{1, 5};
    CHECK(draw(p, after_5, 0).token == 0);
  }
  SUBCASE("min_tokens: the stop ids are masked until the output is long enough") {
    sampling_params p;
    p.temperature = 0;
    p.min_tokens = 2;
    p.min_tokens_stop_ids = {3};
    const std::vector<int32_t> one{0};
    const std::vector<int32_t> two{0, 0};
    CHECK(draw(p, one, 0).token == 0);
    CHECK(draw(p, two, 0).token == 3);
  }
  SUBCASE("logit_bias: +100 makes a token certain, -100 makes it impossible; the logprob is the raw one") {
    sampling_params p;
    p.logit_bias = {{4, 100.0f}};
    for (uint64_t s = 0; s < 50; ++s) {
      auto r = draw(p, {}, s);
      CHECK(r.token == 4);
      CHECK(r.logprob == doctest::Approx(ref[4]).epsilon(1e-5));
    }
    p.logit_bias = {{3, -100.0f}};
    p.temperature = 0;
    CHECK(draw(p, {}, 0).token == 0);
  }
}
