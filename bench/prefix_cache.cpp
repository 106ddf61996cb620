// Prefix caching: time to first token of a long prompt sent again, against the same prompt computed from scratch,
// on a dummy Llama-3.2-1B-shaped model through actorllm::LLM (one process, one run, so the ratio compares like with
// like). Cold runs: the first send, the same prompt under another cache_salt (no hit: tenants stay apart), and the
// same prompt after reset_prefix_cache. Warm runs: the prompt again (its full blocks come from the cache; only the
// tail after the last full block is computed). Prints a table, writes JSON.
#include "bench/bench_json.hpp"
#include "bench/bench_support.hpp"
#include "util/json_writer.hpp"

#include <actorllm/llm.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace {

struct ttft_run {
  std::string name;
  double ttft_seconds = 0;
  int32_t cached_tokens = 0;
};

/// Submits `p` as a stream and returns the time to its first token and the cached tokens its usage reports.
ttft_run measure(actorllm::LLM& llm, const std::string& name, const actorllm::prompt& p) {
  actorllm::sampling_params params;
  params.temperature = 0;
  params.max_tokens = 2;
  params.ignore_eos = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto stream = llm.stream(p, params);
  std::optional<double> ttft;
  while (auto delta = stream.wait_next())
    if (!ttft && !delta->token_ids.empty())
      ttft = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ttft_run r;
  r.name = name;
  r.ttft_seconds = ttft.value_or(0.0);
  r.cached_tokens = stream.output().usage.cached_tokens;
  std::fprintf(stderr, "  %-28s TTFT %8.3f s, cached tokens %d\n", name.c_str(), r.ttft_seconds, r.cached_tokens);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Prefix caching: TTFT of a repeated long prompt, through actorllm::LLM"};
  std::string config_dir = std::string{ACTORLLM_SOURCE_DIR} + "/bench/configs/llama-3.2-1b";
  std::string json_path = "bench/results/prefix_cache.json";
  int64_t prompt_len = 1000;
  int warm_runs = 3;
  int threads = 0;
  app.add_option("--config", config_dir, "Directory with the model's config.json")->capture_default_str();
  app.add_option("--prompt-len", prompt_len, "Prompt tokens")->capture_default_str();
  app.add_option("--warm-runs", warm_runs, "Sends of the cached prompt (the median is reported)")
      ->capture_default_str();
  app.add_option("--threads", threads, "Kernel threads (default: all cores)");
  app.add_option("--json", json_path, "Where to write the JSON results")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  actorllm::engine_config cfg;
  cfg.model = config_dir;
  cfg.load_format = "dummy";
  cfg.dtype = "bfloat16";
  cfg.max_model_len = static_cast<int32_t>(std::max<int64_t>(prompt_len + 64, 256));
  cfg.max_num_batched_tokens = static_cast<int32_t>(std::max<int64_t>(prompt_len + 64, 2048));
  cfg.kv_cache_memory = size_t{1} << 30;
  cfg.threads = threads;
  std::fprintf(stderr, "starting the engine on dummy weights...\n");
  actorllm::LLM llm{cfg};
  const int64_t vocab = llm.info().n_vocab;
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < prompt_len; ++i)
    ids.push_back(static_cast<int32_t>((i * 104729 + 7919) % vocab));
  // Warm-up on another prompt: first touch of the weights and the KV cache, which the cold run must not pay.
  measure(llm, "warm-up (other prompt)", actorllm::prompt{std::vector<int32_t>(ids.rbegin(), ids.rend())});

  std::vector<ttft_run> runs;
  runs.push_back(measure(llm, "cold: first send", actorllm::prompt{ids}));
  std::vector<double> warm;
  for (int i = 0; i < warm_runs; ++i) {
    runs.push_back(measure(llm, "warm: sent again", actorllm::prompt{ids}));
    warm.push_back(runs.back().ttft_seconds);
  }
  runs.push_back(measure(llm, "cold: other cache_salt", actorllm::prompt{ids}.with_cache_salt("another-tenant")));
  llm.reset_prefix_cache();
  runs.push_back(measure(llm, "cold: after reset", actorllm::prompt{ids}));

  std::vector<double> cold;
  for (const auto& r : runs)
    if (r.name.rfind("cold", 0) == 0)
      cold.push_back(r.ttft_seconds);
  const double cold_median = actorllm::bench::median(cold), warm_median = actorllm::bench::median(warm);
  const double ratio = warm_median > 0 ? cold_median / warm_median : 0.0;
  const auto stats = llm.stats();

  std::printf("prefix caching, %ld-token prompt, %s (dummy bf16 weights), %s kernel threads\n",
              static_cast<long>(prompt_len), config_dir.c_str(),
              threads > 0 ? std::to_string(threads).c_str() : "all cores");
  std::printf("%-28s %12s %14s\n", "run", "TTFT (s)", "cached tokens");
  for (const auto& r : runs)
    std::printf("%-28s %12.3f %14d\n", r.name.c_str(), r.ttft_seconds, r.cached_tokens);
  std::printf("\nmedian TTFT cold %.3f s, warm %.3f s: %.1fx lower with the prefix cached\n", cold_median, warm_median,
              ratio);
  std::printf("prefix cache: %lu hits of %lu queried tokens\n", static_cast<unsigned long>(stats.prefix_cache_hits),
              static_cast<unsigned long>(stats.prefix_cache_queries));

  actorllm::json_writer w;
  w.begin_object();
  w.key("benchmark").value("prefix_cache");
  w.key("config").value(config_dir);
  w.key("prompt_len").value(prompt_len);
  w.key("runs").begin_array();
  for (const auto& r : runs) {
    w.begin_object();
    w.key("run").value(r.name);
    w.key("ttft_seconds").value(r.ttft_seconds);
    w.key("cached_tokens").value(static_cast<int64_t>(r.cached_tokens));
    w.end_object();
  }
  w.end_array();
  w.key("cold_median_ttft_seconds").value(cold_median);
  w.key("warm_median_ttft_seconds").value(warm_median);
  w.key("ttft_ratio").value(ratio);
  w.end_object();
  return actorllm::bench::write_json_result(json_path, w.str());
}
