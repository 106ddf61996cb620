// The GPU sampler (cuda_backend::sample: sample_plan on the host, the kernel of kernels/cuda/sampling.cu) against
// cpu::sample on the same logits: random batches over every setting and processor (greedy identical, seeded draws
// identical but for rounding at a boundary, logprobs within tolerance, generators left in the same state), a large
// vocabulary, two successive steps consuming the random streams alike, and a chi-square test of 1e5 seeded draws.
// Skipped without a GPU ("skipped: no GPU"); the same algorithm runs on the CPU in sampling_math_test.cpp.
#include "kernels/cpu/sampling.hpp"
#include "kernels/cuda/cuda_backend.hpp"

#include "gpu_test_util.hpp"
#include "sampling_cases.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

namespace cpu = actorllm::cpu;
namespace ops = actorllm::ops;
using actorllm::dtype;
using actorllm::tensor;
using actorllm::cuda::cuda_backend;
using actorllm::cuda_test::gpu_available;
using actorllm::cuda_test::require_gpu;
using actorllm::sampling_test::check_generators;
using actorllm::sampling_test::check_successive_steps;
using actorllm::sampling_test::chi_square;
using actorllm::sampling_test::chi_square_of;
using actorllm::sampling_test::compare_results;
using actorllm::sampling_test::random_batch;
using actorllm::sampling_test::reference;
using actorllm::sampling_test::reference_probabilities;
using actorllm::sampling_test::reference_run;
using actorllm::sampling_test::sampling_batch;

// The batch's logits uploaded, sampled by the backend over `rngs`.
std::vector<ops::sample_result> sample_on_gpu(cuda_backend& be, const sampling_batch& b,
                                              std::vector<ops::sampler_rng>& rngs) {
  const auto n_rows = static_cast<int64_t>(b.n_rows());
  tensor logits = be.alloc(dtype::f32, {n_rows, b.n_vocab});
  be.upload(logits, b.logits.data(), b.logits.size() * sizeof(float));
  const std::vector<ops::sample_row> rows = b.rows(rngs);
  std::vector<ops::sample_result> out(rows.size());
  be.sample(logits, rows, out);
  // The backend must not have written the logits (the processed rows go to its own scratch).
  std::vector<float> after(b.logits.size());
  be.download(logits, after.data(), after.size() * sizeof(float));
  CHECK(std::memcmp(after.data(), b.logits.data(), after.size() * sizeof(float)) == 0);
  return out;
}

}  // namespace

TEST_CASE("cuda sample: random batches equal cpu::sample" * doctest::skip(!gpu_available())) {
  require_gpu();
  cuda_backend be{0};
  std::mt19937_64 gen{515};
  for (int64_t n_vocab : {1, 7, 64, 1000, 5000, 32000}) {
    for (int round = 0; round < 4; ++round) {
      CAPTURE(n_vocab);
      CAPTURE(round);
      const sampling_batch batch = random_batch(gen, n_vocab, n_vocab >= 32000 ? 8 : 40);
      const reference_run expected = reference(batch);
      std::vector<ops::sampler_rng> rngs = batch.fresh_rngs();
      const std::vector<ops::sample_result> got = sample_on_gpu(be, batch, rngs);
      compare_results(batch, got, expected.results);
      check_generators(rngs, expected.rngs);
    }
  }
}

TEST_CASE("cuda sample: greedy on a 128256-token vocabulary is the CPU's argmax, ties to the lowest id" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda_backend be{0};
  std::mt19937_64 gen{9};
  std::normal_distribution<float> normal(0.0f, 4.0f);
  sampling_batch b;
  b.n_vocab = 128256;
  for (int r = 0; r < 16; ++r) {
    for (int64_t i = 0; i < b.n_vocab; ++i)
      b.logits.push_back(r % 2 == 0 ? normal(gen) : std::round(normal(gen)));  // odd rows: many ties at the top
    ops::sampling_params p;
    p.temperature = 0.0f;
    p.logprobs = r % 4 == 0 ? 20 : 0;
    p.repetition_penalty = r % 3 == 0 ? 1.3f : 1.0f;
    b.params.push_back(p);
    b.prompt.push_back({static_cast<int32_t>(r * 7), 100, 128255});
    b.output.push_back({5, 5, static_cast<int32_t>(r)});
    b.masks.emplace_back();
    b.rng_of.push_back(static_cast<size_t>(r));
    b.seeds.push_back(static_cast<uint64_t>(r));
  }
  const reference_run expected = reference(b);
  std::vector<ops::sampler_rng> rngs = b.fresh_rngs();
  compare_results(b, sample_on_gpu(be, b, rngs), expected.results);
  check_generators(rngs, expected.rngs);
}

TEST_CASE("cuda sample: three successive steps consume the random streams as the CPU does" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda_backend be{0};
  std::mt19937_64 gen{31337};
  check_successive_steps(
      random_batch(gen, 3000, 32), 3,
      [&](const sampling_batch& b, std::vector<ops::sampler_rng>& rngs) { return sample_on_gpu(be, b, rngs); });
}

TEST_CASE("cuda sample: 1e5 seeded draws pass a chi-square test against the CPU's probabilities" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda_backend be{0};
  std::mt19937 gen{4242};
  std::normal_distribution<float> normal{0.0f, 2.0f};
  std::vector<float> row(40);
  for (float& v : row)
    v = normal(gen);
  const std::vector<int32_t> prompt = {1, 2, 3, 3, 9}, output = {3, 9, 9, 17};
  std::vector<ops::sampling_params> settings(4);
  settings[1].temperature = 0.7f;
  settings[2].top_k = 12;
  settings[2].top_p = 0.8f;
  settings[3].min_p = 0.02f;
  settings[3].repetition_penalty = 1.3f;
  settings[3].frequency_penalty = 0.4f;
  settings[3].logit_bias = {{0, 2.5f}};
  constexpr int64_t n_rows = 1000, n_steps = 100;  // 1e5 draws: 1000 rows with their own generators, 100 steps
  for (size_t s = 0; s < settings.size(); ++s) {
    CAPTURE(s);
    sampling_batch b;
    b.n_vocab = static_cast<int64_t>(row.size());
    for (int64_t r = 0; r < n_rows; ++r) {
      b.logits.insert(b.logits.end(), row.begin(), row.end());
      b.params.push_back(settings[s]);
      b.prompt.push_back(prompt);
      b.output.push_back(output);
      b.masks.emplace_back();
      b.rng_of.push_back(static_cast<size_t>(r));
      b.seeds.push_back(static_cast<uint64_t>(s * 100000 + static_cast<size_t>(r)));
    }
    std::vector<ops::sampler_rng> rngs = b.fresh_rngs();
    std::vector<int64_t> hits(row.size(), 0);
    for (int64_t step = 0; step < n_steps; ++step)
      for (const ops::sample_result& r : sample_on_gpu(be, b, rngs))
        ++hits[static_cast<size_t>(r.token)];
    const chi_square c = chi_square_of(hits, reference_probabilities(row, settings[s], prompt, output));
    MESSAGE("setting " << s << ": chi-square " << c.statistic << " (threshold " << c.threshold << ")");
    CHECK(c.outside_support == 0);
    CHECK(c.statistic < c.threshold);
  }
}
