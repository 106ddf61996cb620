// Engine overhead: time per step spent outside the model's forward pass (scheduling, messages, bookkeeping) at
// batch 1 and 64, on a dummy Llama-3.2-1B-shaped model through actorllm::LLM. For a run,
// overhead = wall time − forward time − sampling time (the last two as the sampler shard reports them). Two runs
// per batch size that differ only in max_tokens give the steady-state cost of one more decode step (their
// difference), free of the per-request costs of submitting, prefilling and delivering, which are reported too.
// Prints a table, writes JSON.
#include "bench/bench_json.hpp"
#include "util/json_writer.hpp"

#include <actorllm/llm.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

namespace {

struct overhead_result {
  int64_t batch = 0;
  uint64_t steps = 0;
  double wall_seconds = 0;
  double forward_seconds = 0;
  double sample_seconds = 0;
  double overhead_seconds() const { return wall_seconds - forward_seconds - sample_seconds; }
  double overhead_us_per_step() const { return overhead_seconds() / static_cast<double>(steps) * 1e6; }
};

// The cost of the decode steps that `longer` ran beyond `shorter`.
struct step_cost {
  int64_t batch = 0;
  uint64_t extra_steps = 0;
  double forward_ms = 0;
  double sample_ms = 0;
  double overhead_us = 0;
};

step_cost difference(const overhead_result& shorter, const overhead_result& longer) {
  step_cost c;
  c.batch = longer.batch;
  c.extra_steps = longer.steps - shorter.steps;
  const auto n = static_cast<double>(c.extra_steps);
  c.forward_ms = (longer.forward_seconds - shorter.forward_seconds) / n * 1e3;
  c.sample_ms = (longer.sample_seconds - shorter.sample_seconds) / n * 1e3;
  c.overhead_us = (longer.overhead_seconds() - shorter.overhead_seconds()) / n * 1e6;
  return c;
}

overhead_result measure(actorllm::LLM& llm, int64_t batch, int32_t max_tokens, int64_t prompt_len) {
  std::vector<actorllm::prompt> prompts;
  const int64_t vocab = llm.info().n_vocab;
  for (int64_t s = 0; s < batch; ++s) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < prompt_len; ++i)
      ids.push_back(static_cast<int32_t>((s * 7919 + i * 104729 + 11) % vocab));
    prompts.emplace_back(std::move(ids));
  }
  actorllm::sampling_params params;
  params.temperature = 0;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  auto before = llm.stats();
  auto t0 = std::chrono::steady_clock::now();
  auto outputs = llm.generate(prompts, params);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto after = llm.stats();
  overhead_result r;
  r.batch = batch;
  r.steps = after.n_steps - before.n_steps;
  r.wall_seconds = wall;
  r.forward_seconds = after.forward_seconds - before.forward_seconds;
  r.sample_seconds = after.sample_seconds - before.sample_seconds;
  for (const auto& o : outputs)
    if (o.outputs.at(0).token_ids.size() != static_cast<size_t>(max_tokens))
      throw std::runtime_error("a request did not generate max_tokens tokens");
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Engine overhead per step outside the forward pass, through actorllm::LLM"};
  std::string config_dir = std::string{ACTORLLM_SOURCE_DIR} + "/bench/configs/llama-3.2-1b";
  std::string json_path = "bench/results/engine_overhead.json";
  int32_t steps_small = 24, steps_large = 12;
  int64_t big_batch = 64, prompt_len = 8;
  int threads = 0;
  app.add_option("--config", config_dir, "Directory with the model's config.json")->capture_default_str();
  app.add_option("--batch", big_batch, "The larger batch")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  // Each batch size runs a third of its tokens, then all of them: at least 3, so that the shorter run has one.
  app.add_option("--steps-batch1", steps_small, "Tokens generated at batch 1 (at least 3)")
      ->capture_default_str()
      ->check(CLI::Range(3, 1 << 20));
  app.add_option("--steps-large", steps_large, "Tokens generated per sequence at the larger batch (at least 3)")
      ->capture_default_str()
      ->check(CLI::Range(3, 1 << 20));
  app.add_option("--prompt-len", prompt_len, "Prompt tokens per sequence")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", threads, "Kernel threads (default: all cores)");
  app.add_option("--json", json_path, "Where to write the JSON results")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  actorllm::engine_config cfg;
  cfg.model = config_dir;
  cfg.load_format = "dummy";
  cfg.dtype = "bfloat16";
  cfg.max_model_len = 512;
  cfg.max_num_seqs = static_cast<int32_t>(std::max<int64_t>(big_batch, 1));
  cfg.kv_cache_memory = size_t{1} << 30;
  cfg.threads = threads;
  std::fprintf(stderr, "starting the engine on dummy weights...\n");
  actorllm::LLM llm{cfg};
  measure(llm, 1, 2, prompt_len);  // warm-up: first-touch of the weights and the KV cache
  std::vector<overhead_result> results;
  std::vector<step_cost> costs;
  for (auto [batch, tokens] : {std::pair<int64_t, int32_t>{1, steps_small}, {big_batch, steps_large}}) {
    std::fprintf(stderr, "batch %ld: %d and %d tokens per sequence...\n", static_cast<long>(batch), tokens / 3, tokens);
    auto shorter = measure(llm, batch, tokens / 3, prompt_len);
    auto longer = measure(llm, batch, tokens, prompt_len);
    results.push_back(shorter);
    results.push_back(longer);
    costs.push_back(difference(shorter, longer));
  }

  std::printf("whole runs (per-request costs included)\n");
  std::printf("%-8s %8s %12s %18s %18s %18s\n", "batch", "steps", "wall (s)", "forward/step (ms)", "sampling/step (ms)",
              "overhead/step (us)");
  for (const auto& r : results)
    std::printf("%-8ld %8lu %12.3f %18.2f %18.3f %18.1f\n", static_cast<long>(r.batch),
                static_cast<unsigned long>(r.steps), r.wall_seconds,
                r.forward_seconds / static_cast<double>(r.steps) * 1e3,
                r.sample_seconds / static_cast<double>(r.steps) * 1e3, r.overhead_us_per_step());
  std::printf("\none more decode step (difference of the two runs per batch size)\n");
  std::printf("%-8s %12s %18s %18s %18s\n", "batch", "extra steps", "forward/step (ms)", "sampling/step (ms)",
              "overhead/step (us)");
  for (const auto& c : costs)
    std::printf("%-8ld %12lu %18.2f %18.3f %18.1f\n", static_cast<long>(c.batch),
                static_cast<unsigned long>(c.extra_steps), c.forward_ms, c.sample_ms, c.overhead_us);

  actorllm::json_writer w;
  w.begin_object();
  w.key("benchmark").value("engine_overhead");
  w.key("config").value(config_dir);
  w.key("results").begin_array();
  for (const auto& r : results) {
    w.begin_object();
    w.key("batch").value(r.batch);
    w.key("steps").value(r.steps);
    w.key("wall_seconds").value(r.wall_seconds);
    w.key("forward_seconds").value(r.forward_seconds);
    w.key("sample_seconds").value(r.sample_seconds);
    w.key("overhead_us_per_step").value(r.overhead_us_per_step());
    w.end_object();
  }
  w.end_array();
  w.key("per_decode_step").begin_array();
  for (const auto& c : costs) {
    w.begin_object();
    w.key("batch").value(c.batch);
    w.key("extra_steps").value(c.extra_steps);
    w.key("forward_ms").value(c.forward_ms);
    w.key("sample_ms").value(c.sample_ms);
    w.key("overhead_us").value(c.overhead_us);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return actorllm::bench::write_json_result(json_path, w.str());
}
