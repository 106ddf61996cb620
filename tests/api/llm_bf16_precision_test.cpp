// How much precision the CPU's bf16 path loses, on a random bf16 Llama whose float64 logits (and so the margin
// between its best two tokens at every step) are known. The bf16 kernels round each projection's input to bf16
// before vdpbf16ps, as llama.cpp's BF16 path does; that rounding is the noise any such engine carries. The test
// measures the noise itself, as the distance between the exact float64 reference and the same reference with its
// projection inputs rounded to bf16, and holds the engine to it: its logits stay within that noise of the exact
// ones, and its greedy ids are the exact reference's wherever the margin stands clear of the noise.
#include "actorllm/llm.hpp"
#include "model/model_config.hpp"
#include "model/model_test_util.hpp"
#include "model/reference_llama.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <vector>

using namespace actorllm;
namespace ref = model::test_util;

namespace {

// hidden 512 over 8 heads of 64 (4 kv heads), 4 layers, vocab 2048: deep and wide enough that rounding compounds
// as in a real model, small enough for the float64 reference.
constexpr const char* config_json = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 4, "num_attention_heads": 8,
  "num_key_value_heads": 4, "vocab_size": 2048, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
  "tie_word_embeddings": false})";

constexpr int32_t n_steps = 24;
constexpr int n_top = 20;

// The root mean square of (a - b) over `tokens`, after removing the mean difference (logprobs and logits differ by
// a constant per row).
template <class A, class B>
double centred_rms(const std::vector<int32_t>& tokens, A a, B b) {
  std::vector<double> d;
  for (int32_t t : tokens)
    d.push_back(a(t) - b(t));
  const double mean = std::accumulate(d.begin(), d.end(), 0.0) / static_cast<double>(d.size());
  double ss = 0.0;
  for (double v : d)
    ss += (v - mean) * (v - mean);
  return std::sqrt(ss / static_cast<double>(d.size()));
}

struct step_figures {
  double margin;        // the exact reference's best logit minus its second best
  double noise;         // exact vs bf16-rounded reference, centred RMS over the exact top 20
  double engine_error;  // engine vs exact, the same measure
  bool engine_follows;  // the engine's greedy id is the exact reference's best
};

}  // namespace

TEST_CASE(
    "bf16 precision: the engine's logits stay within the bf16 rounding noise of the float64 reference, and its "
    "greedy ids follow the reference wherever the margin clears that noise") {
  const auto dir = test::make_temp_dir("bf16-precision");
  const model::model_config cfg = model::parse_model_config(config_json, "test config");
  const model::model_weights weights = ref::random_weights(cfg, 23, dtype::bf16);
  ref::write_checkpoint(dir, config_json, weights);

  const std::vector<std::vector<int32_t>> prompts{
      {1, 17, 942, 99, 3, 1250, 7, 88}, {1, 2000, 5, 5, 5, 61, 400}, {1, 1024, 512, 256, 128, 64, 32, 16, 8}};
  engine_config c;
  c.model = dir.string();
  c.device = "cpu";
  c.threads = 2;
  c.kv_cache_memory = size_t{64} << 20;
  c.skip_tokenizer_init = true;
  LLM llm{c};
  sampling_params sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = n_steps;
  sp.logprobs = n_top;
  std::vector<prompt> ps(prompts.begin(), prompts.end());
  const auto outputs = llm.generate(ps, sp);

  std::vector<step_figures> steps;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto& out = outputs.at(p).outputs.at(0);
    REQUIRE(out.token_ids.size() == static_cast<size_t>(n_steps));
    REQUIRE(out.logprobs.size() == static_cast<size_t>(n_steps));
    // Both references over the engine's own sequence: every step is judged on the context the engine had.
    std::vector<int32_t> seq = prompts[p];
    seq.insert(seq.end(), out.token_ids.begin(), out.token_ids.end());
    const auto exact = ref::reference_logits(cfg, weights, seq, ref::matmul_inputs::exact);
    const auto rounded = ref::reference_logits(cfg, weights, seq, ref::matmul_inputs::bf16);
    for (int32_t s = 0; s < n_steps; ++s) {
      const size_t row = (prompts[p].size() - 1 + static_cast<size_t>(s)) * static_cast<size_t>(cfg.n_vocab);
      std::vector<int32_t> order(static_cast<size_t>(cfg.n_vocab));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + n_top, order.end(),
                        [&](int32_t a, int32_t b) { return exact[row + a] > exact[row + b]; });
      std::map<int32_t, double> engine;
      for (const auto& t : out.logprobs[static_cast<size_t>(s)].top)
        engine[t.token] = t.logprob;
      // The exact top 20 that the engine's top 20 holds too (near its tail the two lists may differ by a token).
      std::vector<int32_t> shared;
      for (int k = 0; k < n_top; ++k)
        if (engine.contains(order[static_cast<size_t>(k)]))
          shared.push_back(order[static_cast<size_t>(k)]);
      REQUIRE(shared.size() >= static_cast<size_t>(n_top - 3));
      const std::vector<int32_t> top(order.begin(), order.begin() + n_top);
      steps.push_back({exact[row + order[0]] - exact[row + order[1]],
                       centred_rms(
                           top, [&](int32_t t) { return rounded[row + t]; }, [&](int32_t t) { return exact[row + t]; }),
                       centred_rms(
                           shared, [&](int32_t t) { return engine.at(t); }, [&](int32_t t) { return exact[row + t]; }),
                       out.token_ids[static_cast<size_t>(s)] == order[0]});
    }
  }

  auto rms_of = [&](double step_figures::*field) {
    double ss = 0.0;
    for (const auto& s : steps)
      ss += s.*field * s.*field;
    return std::sqrt(ss / static_cast<double>(steps.size()));
  };
  const double noise = rms_of(&step_figures::noise);
  const double engine_error = rms_of(&step_figures::engine_error);
  // A margin under 6 times the noise may be turned over by rounding alone; above it the engine must follow.
  const double tie_zone = 6.0 * noise;
  int clear = 0, followed = 0;
  for (const auto& s : steps) {
    if (s.margin <= tie_zone)
      continue;
    ++clear;
    followed += s.engine_follows ? 1 : 0;
    CHECK_MESSAGE(s.engine_follows, fmt::format("margin {:.4f} above the tie zone {:.4f}", s.margin, tie_zone));
  }
  MESSAGE(fmt::format("{} steps: bf16 rounding noise {:.5f}, engine error {:.5f}, {} of {} clear margins followed",
                      steps.size(), noise, engine_error, followed, clear));
  CHECK(noise > 0.0);  // the rounding is felt at all: the measure can tell
  CHECK(engine_error <= 2.0 * noise);
  // Most steps stand clear of the noise, so following them says something.
  CHECK(clear >= static_cast<int>(steps.size()) * 3 / 4);
}
