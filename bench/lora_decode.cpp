// Multi-LoRA decode cost on the CPU: batch-8 (--batch) decode tokens/s of one model shape (dummy bf16 weights) with
// LoRA off, with LoRA on and every row on the base model, with every row on one adapter, and with the rows split
// over two adapters and the base model. The adapters (rank --rank, every Linear a PEFT adapter may target) are written
// by scripts/make_lora_adapter.py into a temporary directory. The variants alternate within each of --rounds rounds
// beside the memory-bandwidth probe (the VM's bandwidth drifts); the table gives medians of tokens/s and of the
// per-round ratios to LoRA off. Prints a table, writes JSON (--json).
#include "bench/bench_json.hpp"
#include "bench/bench_support.hpp"
#include "bench/decode_loop.hpp"
#include "bench/memory_bandwidth.hpp"
#include "comm/collective.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/llama_model.hpp"
#include "model/model_source.hpp"
#include "model/weight_loader.hpp"
#include "util/json_writer.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
namespace fs = std::filesystem;

namespace {

/// One measured configuration: which model, and each row's adapter id (0: base).
struct variant {
  std::string name;
  bool lora_model = false;
  std::vector<int32_t> row_loras;
  std::vector<double> tokens_per_s, ratio;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Multi-LoRA decode cost on the CPU (dummy bf16 weights at a model's shape)"};
  std::string config_dir = std::string{ACTORLLM_SOURCE_DIR} + "/bench/configs/tinyllama-1.1b";
  int64_t batch = 8, rank = 16, steps = 16, prompt_len = 32;
  int rounds = 5, threads = 0;
  std::string json_path = "bench/results/lora_decode.json";
  app.add_option("--model", config_dir, "Model directory (its config.json gives the shape)")->capture_default_str();
  app.add_option("--batch", batch, "Decode batch")->capture_default_str();
  app.add_option("--rank", rank, "The adapters' rank (also max_lora_rank)")->capture_default_str();
  app.add_option("--steps", steps, "Timed decode steps per measurement")->capture_default_str();
  app.add_option("--prompt", prompt_len, "Prompt tokens per row before the timed steps")->capture_default_str();
  app.add_option("--rounds", rounds, "Alternated rounds")->capture_default_str();
  app.add_option("--threads", threads, "Kernel threads (0: every core)");
  app.add_option("--json", json_path, "Where to write the JSON result")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (batch < 2 || rank < 1 || rounds < 1 || steps < 1) {
    std::fprintf(stderr, "--batch must be at least 2, --rank, --rounds and --steps at least 1\n");
    return 2;
  }

  const fs::path adapters = fs::temp_directory_path() / fmt::format("actorllm-bench-lora-{}", ::getpid());
  const bench::scoped_dir remove_adapters{adapters};
  std::vector<model::lora_source> sources;
  for (int32_t id : {1, 2}) {
    const fs::path out = adapters / fmt::format("adapter-{}", id);
    const std::string cmd = fmt::format(
        "python3 '{}/scripts/make_lora_adapter.py' --model '{}' --out '{}' --rank {} --alpha {} --targets "
        "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj --seed {} --dtype bfloat16 > /dev/null",
        ACTORLLM_SOURCE_DIR, config_dir, out.string(), rank, 2 * rank, id);
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "writing the adapter failed: %s\n", cmd.c_str());
      return 1;
    }
    sources.push_back({id, out.string()});
  }

  cpu::cpu_backend be{threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  single_rank_collective comm;
  model::shard_spec shard;
  model::load_options load;
  load.format = model::load_format::dummy;
  load.weight_dtype = dtype::bf16;
  std::fprintf(stderr, "building the models...\n");
  auto plain_loaded = model::load_shard(config_dir, shard, load);
  const model::model_config cfg = plain_loaded.config;
  model::llama_model plain{cfg, std::move(plain_loaded.weights), shard, comm, be};
  auto lora_loaded = model::load_shard(config_dir, shard, load);
  model::llama_model with_lora{cfg, std::move(lora_loaded.weights), shard, comm, be};
  with_lora.enable_lora({2, static_cast<int32_t>(rank), 2});

  std::vector<variant> variants;
  const auto n = static_cast<size_t>(batch);
  variants.push_back({"LoRA off", false, std::vector<int32_t>(n, 0), {}, {}});
  variants.push_back({"LoRA on, every row base", true, std::vector<int32_t>(n, 0), {}, {}});
  variants.push_back({"LoRA on, every row adapter 1", true, std::vector<int32_t>(n, 1), {}, {}});
  std::vector<int32_t> mixed(n);
  for (size_t i = 0; i < n; ++i)
    mixed[i] = static_cast<int32_t>(i % 3);  // base, adapter 1, adapter 2, base, ...
  variants.push_back({"LoRA on, rows over base + 2 adapters", true, mixed, {}, {}});

  std::vector<double> bandwidths;
  for (int round = 0; round < rounds; ++round) {
    bandwidths.push_back(bench::probe_read_bandwidth(be.pool()).bytes_per_s);
    double base = 0;
    for (variant& v : variants) {
      const double tps =
          bench::decode_tokens_per_second(v.lora_model ? with_lora : plain, static_cast<int64_t>(v.row_loras.size()),
                                          prompt_len, steps, 16, v.row_loras, sources);
      v.tokens_per_s.push_back(tps);
      if (&v == &variants.front())
        base = tps;
      v.ratio.push_back(tps / base);
    }
    std::fprintf(stderr, "round %d of %d done\n", round + 1, rounds);
  }

  std::printf("LoRA decode, %s shape, dummy bf16 weights, batch %ld, rank %ld, %d threads, %d rounds\n",
              fs::path(config_dir).filename().c_str(), static_cast<long>(batch), static_cast<long>(rank),
              be.pool().size(), rounds);
  std::printf("bandwidth probe (median): %.1f GB/s\n", bench::median(bandwidths) / 1e9);
  std::printf("%-40s %14s %16s\n", "variant", "tokens/s", "vs LoRA off");
  for (const variant& v : variants)
    std::printf("%-40s %14.2f %15.3fx\n", v.name.c_str(), bench::median(v.tokens_per_s), bench::median(v.ratio));
  std::printf("LoRA device slots: %.1f MiB\n",
              static_cast<double>(with_lora.lora() ? with_lora.lora()->device_bytes() : 0) / (1 << 20));

  json_writer w;
  w.begin_object();
  w.key("bench").value("lora_decode");
  w.key("model").value(fs::path(config_dir).filename().string());
  w.key("batch").value(batch);
  w.key("rank").value(rank);
  w.key("rounds").value(rounds);
  w.key("bandwidth_gb_s").value(bench::median(bandwidths) / 1e9);
  w.key("variants").begin_array();
  for (const variant& v : variants) {
    w.begin_object();
    w.key("name").value(v.name);
    w.key("tokens_per_s").value(bench::median(v.tokens_per_s));
    w.key("ratio_to_lora_off").value(bench::median(v.ratio));
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return bench::write_json_result(json_path, w.str());
}
