// Executors compared: decode speed of a dummy Llama-3.2-1B-shaped model (bf16) at tp 1, and at tp 2 as threads of
// one process (uni) and as two worker processes (mp: sharing memory for the TP all-reduce, as by default, and with
// Gloo over loopback TCP instead), all through actorllm::LLM in one run.
// A step's time is the difference of two runs that differ only in max_tokens, divided by the extra steps, so
// submitting and prefilling drop out. Reports tokens/s per layout, the ratio to tp 1, and the per-step latency
// that going multi-process adds (mp − uni at the same tp). With --hog N each layout is also measured beside N busy
// processes the bench starts and stops itself (the cores shared with other work), and the table gives that speed as a
// share of the quiet one: a fair share is the engine's threads over those threads plus N, and the ranks of a TP group
// meet in every collective, so a rank the OS put behind a busy process holds the others. Prints a table, writes JSON.
#include "bench/bench_json.hpp"
#include "bench/cpu_hog.hpp"
#include "util/json_writer.hpp"

#include <fmt/format.h>

#include <actorllm/llm.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

struct layout {
  std::string key;  // as --layouts names it
  std::string name;
  int32_t tp = 1;
  std::string executor;
  bool shm_collective = true;  // ACTORLLM_SHM_COLLECTIVE for the workers
};

struct layout_result {
  layout l;
  int64_t batch = 0;
  double step_ms = 0;
  double tokens_per_second = 0;
  double hog_step_ms = 0;  // beside --hog busy processes (0: not measured)
};

double run_seconds(actorllm::LLM& llm, int64_t batch, int32_t max_tokens);

// A decode step's milliseconds at `batch`: the difference of a run of `long_tokens` and one of `short_tokens`, over
// the extra steps.
double step_ms(actorllm::LLM& llm, int64_t batch, int32_t short_tokens, int32_t long_tokens) {
  const double a = run_seconds(llm, batch, short_tokens);
  const double b = run_seconds(llm, batch, long_tokens);
  return (b - a) / (long_tokens - short_tokens) * 1e3;
}

double run_seconds(actorllm::LLM& llm, int64_t batch, int32_t max_tokens) {
  std::vector<actorllm::prompt> prompts;
  for (int64_t s = 0; s < batch; ++s)  // ids below 256, so any vocabulary takes them
    prompts.emplace_back(std::vector<int32_t>{static_cast<int32_t>(100 + s % 100), 20, 30, 40, 50, 60, 70, 80});
  actorllm::sampling_params p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  const auto t0 = std::chrono::steady_clock::now();
  llm.generate(prompts, p);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string fmt_hog_header(int hog) { return "beside " + std::to_string(hog) + " busy (ms)"; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode speed of the uni and mp executors on a dummy 1B-shaped model"};
  std::string config_dir = std::string{ACTORLLM_SOURCE_DIR} + "/bench/configs/llama-3.2-1b";
  std::string json_path = "bench/results/executors.json";
  int32_t short_tokens = 6, long_tokens = 22;
  int threads = 0, hog = 0;
  std::vector<int64_t> batches{1, 8};
  std::vector<std::string> layout_keys{"tp1", "uni", "mp", "mp-gloo"};
  app.add_option("--config", config_dir, "Directory with the model's config.json")->capture_default_str();
  app.add_option("--short", short_tokens, "Tokens of the shorter run")->capture_default_str();
  app.add_option("--long", long_tokens, "Tokens of the longer run")->capture_default_str();
  app.add_option("--batch", batches, "Batch sizes")->capture_default_str();
  app.add_option("--threads", threads, "Kernel threads over all shards (default: all cores)");
  app.add_option("--layouts", layout_keys,
                 "Layouts to measure, in order: tp1 (one shard), uni (tp 2, threads), mp (tp 2, worker processes "
                 "sharing memory), mp-gloo (tp 2, worker processes, Gloo all-reduce)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--hog", hog, "Also measure each layout beside this many busy processes (0: quiet only)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--json", json_path, "Where to write the JSON results")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (std::getenv("ACTORLLM_WORKER_BIN") == nullptr) {  // bench binaries live in build/bench, actorllm in build/
    const auto self = std::filesystem::read_symlink("/proc/self/exe");
    ::setenv("ACTORLLM_WORKER_BIN", (self.parent_path().parent_path() / "actorllm").c_str(), 1);
  }

  const std::vector<layout> known{{"tp1", "tp1 uni", 1, "uni"},
                                  {"uni", "tp2 uni (threads)", 2, "uni"},
                                  {"mp", "tp2 mp (processes)", 2, "mp"},
                                  {"mp-gloo", "tp2 mp, Gloo all-reduce", 2, "mp", false}};
  std::vector<layout> layouts;
  for (const auto& key : layout_keys) {
    const auto it = std::find_if(known.begin(), known.end(), [&](const layout& l) { return l.key == key; });
    if (it == known.end()) {
      std::fprintf(stderr, "--layouts: unknown layout '%s' (known: tp1, uni, mp, mp-gloo)\n", key.c_str());
      return 1;
    }
    layouts.push_back(*it);
  }
  std::vector<layout_result> results;
  for (const auto& l : layouts) {
    actorllm::engine_config cfg;
    cfg.model = config_dir;
    cfg.load_format = "dummy";
    cfg.dtype = "bfloat16";
    cfg.max_model_len = 512;
    cfg.kv_cache_memory = size_t{512} << 20;
    cfg.threads = threads;
    cfg.tensor_parallel_size = l.tp;
    cfg.distributed_executor_backend = l.executor;
    ::setenv("ACTORLLM_SHM_COLLECTIVE", l.shm_collective ? "1" : "0", 1);  // the workers inherit it
    std::fprintf(stderr, "%s: starting...\n", l.name.c_str());
    actorllm::LLM llm{cfg};
    run_seconds(llm, 1, 2);  // warm-up: first touch of weights and cache
    for (int64_t batch : batches) {
      layout_result r;
      r.l = l;
      r.batch = batch;
      r.step_ms = step_ms(llm, batch, short_tokens, long_tokens);
      r.tokens_per_second = static_cast<double>(batch) / (r.step_ms / 1e3);
      std::fprintf(stderr, "  batch %ld: %.1f ms per step\n", static_cast<long>(batch), r.step_ms);
      if (hog > 0) {
        const actorllm::bench::cpu_hog busy(hog);
        if (busy.running() != static_cast<size_t>(hog)) {
          std::fprintf(stderr, "--hog: started %zu of %d busy processes\n", busy.running(), hog);
          return 1;
        }
        r.hog_step_ms = step_ms(llm, batch, short_tokens, long_tokens);
        std::fprintf(stderr, "  batch %ld beside %d busy processes: %.1f ms per step\n", static_cast<long>(batch), hog,
                     r.hog_step_ms);
      }
      results.push_back(r);
    }
  }

  std::printf("%-24s %6s %14s %14s %14s %22s", "layout", "batch", "step (ms)", "tokens/s", "vs tp1",
              "added by processes (ms)");
  if (hog > 0)
    std::printf(" %16s %14s", fmt_hog_header(hog).c_str(), "share of quiet");
  std::printf("\n");
  std::vector<double> added;
  for (const auto& r : results) {
    double base = 0, uni_same_tp = 0;
    for (const auto& o : results) {
      if (o.batch != r.batch)
        continue;
      if (o.l.tp == 1)
        base = o.tokens_per_second;
      if (o.l.tp == r.l.tp && o.l.executor == "uni")
        uni_same_tp = o.step_ms;
    }
    // Only where the layouts to compare with were measured.
    const bool has_extra = r.l.executor == "mp" && uni_same_tp > 0;
    const double extra = has_extra ? r.step_ms - uni_same_tp : 0.0;
    added.push_back(extra);
    const std::string vs_tp1 = base > 0 ? fmt::format("{:.2f}x", r.tokens_per_second / base) : "-";
    std::printf("%-24s %6ld %14.3f %14.2f %14s %22s", r.l.name.c_str(), static_cast<long>(r.batch), r.step_ms,
                r.tokens_per_second, vs_tp1.c_str(), has_extra ? fmt::format("{:.3f}", extra).c_str() : "-");
    if (hog > 0)
      std::printf(" %16.3f %13.1f%%", r.hog_step_ms, 100.0 * r.step_ms / r.hog_step_ms);
    std::printf("\n");
  }

  actorllm::json_writer w;
  w.begin_object();
  w.key("benchmark").value("executors");
  w.key("config").value(config_dir);
  w.key("hog_processes").value(static_cast<int64_t>(hog));
  w.key("results").begin_array();
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    w.begin_object();
    w.key("layout").value(r.l.name);
    w.key("tp").value(static_cast<int64_t>(r.l.tp));
    w.key("executor").value(r.l.executor);
    w.key("shm_collective").value(r.l.shm_collective);
    w.key("batch").value(r.batch);
    w.key("step_ms").value(r.step_ms);
    w.key("tokens_per_second").value(r.tokens_per_second);
    w.key("added_by_processes_ms").value(added[i]);
    if (hog > 0) {
      w.key("step_ms_beside_hog").value(r.hog_step_ms);
      w.key("share_of_quiet_beside_hog").value(r.step_ms / r.hog_step_ms);
    }
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return actorllm::bench::write_json_result(json_path, w.str());
}
