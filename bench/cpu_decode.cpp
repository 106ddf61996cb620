// CPU decode/prefill benchmark on any Hugging Face model directory (its safetensors, or dummy weights at its shape when
// it has none or --load-format dummy): decode tokens/s at batch 1 and 32, prefill tokens/s for a 512-token prompt,
// the machine's memory bandwidth (bench/memory_bandwidth.hpp: the best of several read patterns), and batch-1 decode
// as a fraction of the bandwidth roofline (weight bytes read per token ÷ bandwidth; for MoE models only the
// router-picked experts count, n_expert_used of n_expert per layer). The probe and the measurements
// alternate for --rounds rounds and the table gives medians (each round's decode is set against that round's probe),
// since a shared machine's bandwidth drifts. Batch 1 runs twice a round: in segments held to probe passes read beside
// them (--paired-segment-steps), then in one uninterrupted run that gives its tokens/s. With --hog N every round also
// decodes batch 1 beside N busy processes this bench starts and stops itself (the cores shared with other work): the
// ratio to the round's quiet decode says whether the engine keeps its fair share. Prints a table, writes JSON. With
// --save-weights DIR it writes the dummy weights as a checkpoint instead (DIR/config.json + model.safetensors), for
// another engine to run the same bytes (bench/compare_llama_cpp.sh), and measures nothing.
#include "bench/bench_json.hpp"
#include "bench/bench_support.hpp"
#include "bench/cpu_hog.hpp"
#include "bench/decode_loop.hpp"
#include "bench/export/safetensors_writer.hpp"
#include "bench/memory_bandwidth.hpp"
#include "bench/paired_roofline.hpp"
#include "comm/collective.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/kv_cache_dtype.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/model_source.hpp"
#include "model/weight_loader.hpp"
#include "model/weight_table.hpp"
#include "util/json_writer.hpp"
#include "util/thread_pool.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using namespace actorllm;
using bench::cpu_clock;
using bench::cpu_hog;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double prefill_tokens_per_second(model::llama_model& llm, int64_t n_tokens, int64_t block_size, int reps) {
  const int64_t blocks = (n_tokens + block_size - 1) / block_size;
  model::kv_cache cache{llm.device_backend(), llm.cache_shape(block_size), blocks};
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> prompt(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i)
    prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 104729) % llm.config().n_vocab);
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    model::forward_batch fb;
    fb.add_sequence(prompt, 0, table, true);
    auto t0 = clock_type::now();
    llm.forward(fb, cache);
    best = std::max(best, static_cast<double>(n_tokens) / seconds_since(t0));
  }
  return best;
}

/// Weight bytes of the largest rank of a `tp`-rank group, from the weight table's slices (nothing is loaded).
/// The most weight bytes any rank holds with tp ranks per replica; with expert parallelism over dp lockstep
/// replicas the EP group has dp × tp ranks (each replica's ranks hold other experts).
size_t max_rank_weight_bytes(const model::model_config& cfg, int tp, bool expert_parallel, dtype type, int dp = 1) {
  size_t most = 0;
  for (int d = 0; d < dp; ++d)
    for (int r = 0; r < tp; ++r) {
      model::shard_spec shard{r, tp, 0, -1, expert_parallel};
      shard.dp_rank = d;
      shard.dp_size = dp;
      size_t bytes = 0;
      for (const auto& decl : model::llama_weight_table(cfg, shard).weights) {
        const auto slice = model::slice_for(decl, r, tp);
        size_t n = dtype_size(type);
        for (int64_t dim : slice.shape)
          n *= static_cast<size_t>(dim);
        bytes += n;
      }
      most = std::max(most, bytes);
    }
  return most;
}

// The 1-minute load average (-1 where /proc/loadavg cannot be read): a measurement on a busy machine says so.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return in ? load : -1.0;
}

// The share of this process's resident memory mapped in 2 MiB pages (anonymous, file and shmem; -1 where
// /proc/self/smaps_rollup cannot be read). The weights are nearly all of it: a decode step streams weights in small
// pages about 5% slower (util/huge_file_pages.hpp).
double huge_page_share() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  double rss = 0, huge = 0, kib = 0;
  std::string unit;
  while (in >> key) {
    if (key == "Rss:" || key == "AnonHugePages:" || key == "FilePmdMapped:" || key == "ShmemPmdMapped:") {
      in >> kib >> unit;
      (key == "Rss:" ? rss : huge) += kib;
    }
  }
  return rss > 0 ? huge / rss : -1.0;
}

/// One weight format of --variants: the model's dummy bf16 weights as they are, or quantized the way a checkpoint of
/// that format would hold them (model::quantize_dummy_weights with the format's usual settings).
struct weight_variant {
  std::string name;
  model::quantization_config quant;
};

std::optional<weight_variant> parse_variant(const std::string& name) {
  weight_variant v{name, {}};
  auto& q = v.quant;
  if (name == "bf16")
    return v;
  if (name == "int8") {  // GPTQ 8-bit, symmetric, groups of 128: weight-only
    q.method = model::quant_method::gptq;
    q.bits = 8;
    q.group_size = 128;
  } else if (name == "int8-channel") {  // compressed-tensors W8A16 per channel
    q.method = model::quant_method::compressed_tensors;
    q.format = model::ct_format::int_quantized;
    q.bits = 8;
  } else if (name == "w8a8") {  // compressed-tensors W8A8: int8 per channel, activations int8 per token
    q.method = model::quant_method::compressed_tensors;
    q.format = model::ct_format::int_quantized;
    q.bits = 8;
    q.activations = activation_quant::int8_per_token;
  } else if (name == "int4") {  // AWQ: 4-bit, groups of 128, zero points
    q.method = model::quant_method::awq;
    q.bits = 4;
    q.group_size = 128;
    q.symmetric = false;
  } else if (name == "fp8") {  // fp8 per channel, run weight-only (dequantized to bf16)
    q.method = model::quant_method::fp8;
    q.quantize_at_load = true;
    q.bits = 8;
  } else {
    return std::nullopt;
  }
  return v;
}

/// --variants: every format on the same dummy weights of one shape, measured alternately in each round beside the
/// bandwidth probe, with each format's decode set against bf16's of the same round.
int run_variants(const std::string& config_dir, const std::vector<weight_variant>& variants, cpu::cpu_backend& be,
                 int rounds, int64_t steps, int64_t prompt_len, int64_t prefill, int prefill_reps,
                 const kv_cache_dtype_choice& kv_choice, const std::string& json_path) {
  thread_pool& pool = be.pool();
  model::shard_spec shard;
  model::load_options load;
  load.format = model::load_format::dummy;
  load.weight_dtype = dtype::bf16;
  struct built {
    std::unique_ptr<model::llama_model> llm;
    size_t weight_bytes = 0;
    size_t bytes_per_token = 0;
    std::vector<double> decode, prefill, ratio, fraction;
  };
  std::vector<built> models;
  single_rank_collective comm;
  for (const weight_variant& v : variants) {
    std::fprintf(stderr, "building %s...\n", v.name.c_str());
    auto loaded = model::load_shard(config_dir, shard, load);
    model::model_config cfg = loaded.config;
    cfg.quant = v.quant;
    model::quantize_dummy_weights(cfg, model::llama_weight_table(cfg, shard), shard, dtype::bf16, load.seed,
                                  loaded.weights);
    built b;
    b.weight_bytes = loaded.weights.total_bytes();
    b.bytes_per_token = b.weight_bytes;
    if (const auto* e = loaded.weights.find("model.embed_tokens.weight"); e && !cfg.tie_word_embeddings)
      b.bytes_per_token -= e->nbytes();
    const cpu::cpu_backend::packed_bytes before = be.packed_weight_bytes();
    b.llm = std::make_unique<model::llama_model>(cfg, std::move(loaded.weights), shard, comm, be);
    const cpu::cpu_backend::packed_bytes after = be.packed_weight_bytes();  // read as packed (compact: ~3/4)
    b.bytes_per_token = b.bytes_per_token - (after.bf16 - before.bf16) + (after.packed - before.packed);
    b.llm->set_kv_cache_dtype(resolve_kv_cache_dtype(kv_choice, *load.weight_dtype));
    models.push_back(std::move(b));
  }
  const int64_t block_size = 16;
  std::vector<double> bandwidths;
  for (int round = 0; round < rounds; ++round) {
    const bench::bandwidth_probe probe = bench::probe_read_bandwidth(pool);
    bandwidths.push_back(probe.bytes_per_s);
    std::fprintf(stderr, "round %d/%d: %.1f GB/s\n", round + 1, rounds, probe.bytes_per_s / 1e9);
    for (built& b : models) {
      b.decode.push_back(bench::decode_tokens_per_second(*b.llm, 1, prompt_len, steps, block_size));
      b.fraction.push_back(b.decode.back() / (probe.bytes_per_s / static_cast<double>(b.bytes_per_token)));
      if (prefill > 0)
        b.prefill.push_back(prefill_tokens_per_second(*b.llm, prefill, block_size, prefill_reps));
    }
    for (built& b : models)
      b.ratio.push_back(b.decode.back() / models.front().decode.back());
  }
  std::printf("%s: %d threads, %d alternated rounds, memory read bandwidth %.1f GB/s (median)\n",
              std::filesystem::path{config_dir}.filename().c_str(), pool.size(), rounds,
              bench::median(bandwidths) / 1e9);
  std::printf("%-14s %12s %16s %14s %16s %18s\n", "weights", "weights GB", "decode b1 tok/s",
              fmt::format("vs {}", variants.front().name).c_str(), "b1 / roofline",
              fmt::format("prefill {} tok/s", prefill).c_str());
  for (size_t i = 0; i < models.size(); ++i) {
    const built& b = models[i];
    std::printf("%-14s %12.3f %16.2f %13.2fx %15.1f%% %18.1f\n", variants[i].name.c_str(),
                static_cast<double>(b.weight_bytes) / 1e9, bench::median(b.decode), bench::median(b.ratio),
                100.0 * bench::median(b.fraction), b.prefill.empty() ? 0.0 : bench::median(b.prefill));
  }
  json_writer w;
  w.begin_object();
  w.key("benchmark").value("cpu_decode_variants");
  w.key("model").value(config_dir);
  w.key("threads").value(pool.size());
  w.key("rounds").value(rounds);
  w.key("memory_bandwidth_bytes_per_s").value(bench::median(bandwidths));
  w.key("per_round_bandwidth_bytes_per_s").begin_array();
  for (double bw : bandwidths)
    w.value(bw);
  w.end_array();
  w.key("variants").begin_array();
  for (size_t i = 0; i < models.size(); ++i) {
    const built& b = models[i];
    w.begin_object();
    w.key("name").value(variants[i].name);
    w.key("quantization").value(variants[i].quant.describe());
    w.key("weight_bytes").value(static_cast<uint64_t>(b.weight_bytes));
    w.key("decode_batch1_tokens_per_s").value(bench::median(b.decode));
    w.key("decode_batch1_over_first").value(bench::median(b.ratio));
    w.key("batch1_fraction_of_roofline").value(bench::median(b.fraction));
    w.key("prefill_tokens_per_s").value(b.prefill.empty() ? 0.0 : bench::median(b.prefill));
    w.key("per_round_decode_batch1_tokens_per_s").begin_array();
    for (double d : b.decode)
      w.value(d);
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return bench::write_json_result(json_path, w.str());
}

// `key`: {streams, prefetch_bytes, nta, lines} of `p`, the fields bench_probe_passes takes on a line.
void write_pattern_fields(json_writer& w, const char* key, const bench::read_pattern& p) {
  w.key(key).begin_object();
  w.key("streams").value(p.streams);
  w.key("prefetch_bytes").value(p.prefetch);
  w.key("nta").value(p.nta);
  w.key("lines").value(p.lines);
  w.end_object();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU decode/prefill benchmark on a model directory (real or dummy weights)"};
  std::string config_dir = std::string{ACTORLLM_SOURCE_DIR} + "/bench/configs/llama-3.2-1b";
  std::string json_path = "bench/results/cpu_decode.json";
  std::string dtype_arg = "bfloat16";
  std::string format_name = "auto";
  std::string kv_dtype_arg = "auto";
  int threads = 0, rounds = 3, hog = 0;
  int64_t steps = 16, batch1_steps = 0, prompt_len = 16, prefill = 512, big_batch = 32, segment_steps = 8;
  int prefill_reps = 2;
  bool batch1_last = false;
  app.add_option("--model,--config", config_dir, "Hugging Face model directory (config.json, safetensors optional)")
      ->capture_default_str();
  app.add_option("--load-format", format_name,
                 "auto (the directory's safetensors, dummy weights when it has none), safetensors or dummy")
      ->capture_default_str();
  app.add_option("--dtype", dtype_arg, "Weight dtype (auto: the checkpoint's)")->capture_default_str();
  app.add_option("--kv-cache-dtype", kv_dtype_arg,
                 fmt::format("KV cache element type, as serve's flag: {} (auto: the weights' dtype, as serve keeps "
                             "it)",
                             kv_cache_dtype_values))
      ->capture_default_str();
  app.add_option("--threads", threads, "Threads (default: all cores)");
  app.add_option("--rounds", rounds, "Alternated rounds of probe and measurements (medians reported)")
      ->capture_default_str();
  app.add_option("--decode-steps", steps, "Timed decode steps per batch size")->capture_default_str();
  app.add_option("--batch1-steps", batch1_steps,
                 "Timed decode steps at batch 1 (0: --decode-steps), e.g. 64 beside llama-bench's tg64")
      ->capture_default_str();
  app.add_option("--paired-segment-steps", segment_steps,
                 "Batch-1 steps per segment compared with a probe pass read just before and after it (0: none)")
      ->capture_default_str();
  app.add_option("--prompt-len", prompt_len, "Context each decoding sequence starts from")->capture_default_str();
  app.add_option("--prefill-tokens", prefill, "Prompt length of the prefill measurement (0: no prefill measured)")
      ->capture_default_str();
  app.add_option("--prefill-reps", prefill_reps, "Prefill repetitions per round (best is kept)")->capture_default_str();
  app.add_option("--batch", big_batch, "The larger decode batch")->capture_default_str();
  app.add_option("--hog", hog, "Also decode batch 1 beside N busy processes, every round (0: not)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  app.add_option("--json", json_path, "Where to write the JSON results")->capture_default_str();
  app.add_flag(
      "--batch1-last", batch1_last,
      "Measure each round's larger batch and prefill first, then the probe and batch 1 (and the hog's batch 1), "
      "so that batch 1 ends the round (compare_llama_cpp.sh starts llama.cpp's tg64 right after it)");
  std::string variants_arg;
  app.add_option("--variants", variants_arg,
                 "Compare weight formats on the model's dummy weights, alternately per round: a comma list of bf16, "
                 "int8 (GPTQ g128), int8-channel (W8A16), w8a8, int4 (AWQ g128), fp8; the first is the baseline");
  std::string save_dir;
  app.add_option("--save-weights", save_dir,
                 "Write the dummy weights (seed 0, --dtype) as a checkpoint in this directory and exit: config.json "
                 "and model.safetensors, for another engine to run the same bytes");
  CLI11_PARSE(app, argc, argv);
  std::string kv_error;
  const auto kv_choice = parse_kv_cache_dtype(kv_dtype_arg, kv_error);
  if (!kv_choice) {
    std::fprintf(stderr, "%s\n", kv_error.c_str());
    return 2;
  }
  // auto resolves to the weights' float type, which every CPU cache holds; a type named outright may not be one.
  if (!kv_choice->follows_model)
    if (std::string why = kv_cache_dtype_unsupported(kv_choice->type, device_kind::cpu); !why.empty()) {
      std::fprintf(stderr, "%s\n", why.c_str());
      return 2;
    }
  if (batch1_last && !variants_arg.empty()) {
    std::fprintf(stderr,
                 "--batch1-last: orders the rounds of one model's measurements; it does not combine with "
                 "--variants\n");
    return 2;
  }
  if (!save_dir.empty() && !variants_arg.empty()) {
    std::fprintf(stderr, "--save-weights: writes one set of weights; it does not combine with --variants\n");
    return 2;
  }
  if (steps < 1) {
    std::fprintf(stderr, "--decode-steps: must be at least 1, got %ld\n", static_cast<long>(steps));
    return 2;
  }
  if (batch1_steps < 0) {
    std::fprintf(stderr, "--batch1-steps: must be at least 0 (0: --decode-steps), got %ld\n",
                 static_cast<long>(batch1_steps));
    return 2;
  }
  if (batch1_steps == 0)
    batch1_steps = steps;
  if (segment_steps < 0) {
    std::fprintf(stderr, "--paired-segment-steps: must be at least 0 (0: no paired probe), got %ld\n",
                 static_cast<long>(segment_steps));
    return 2;
  }
  if (rounds < 1) {
    std::fprintf(stderr, "--rounds: must be at least 1, got %d\n", rounds);
    return 2;
  }
  if (prefill < 0) {
    std::fprintf(stderr, "--prefill-tokens: must be at least 0 (0: no prefill measured), got %ld\n",
                 static_cast<long>(prefill));
    return 2;
  }
  if (prefill > 0 && prefill_reps < 1) {
    std::fprintf(stderr, "--prefill-reps: must be at least 1, got %d\n", prefill_reps);
    return 2;
  }

  cpu::cpu_backend be{threads > 0 ? threads : thread_pool::global().size()};
  thread_pool& pool = be.pool();
  if (!variants_arg.empty()) {
    std::vector<weight_variant> variants;
    std::stringstream list(variants_arg);
    for (std::string name; std::getline(list, name, ',');) {
      auto v = parse_variant(name);
      if (!v) {
        std::fprintf(stderr, "--variants: unknown format '%s' (bf16, int8, int8-channel, w8a8, int4, fp8)\n",
                     name.c_str());
        return 2;
      }
      variants.push_back(*v);
    }
    return run_variants(config_dir, variants, be, rounds, batch1_steps, prompt_len, prefill, prefill_reps, *kv_choice,
                        json_path);
  }
  model::load_options load;
  if (dtype_arg != "auto") {
    auto wdt = parse_dtype(dtype_arg);
    if (!wdt) {
      std::fprintf(stderr, "--dtype: unknown dtype '%s'\n", dtype_arg.c_str());
      return 2;
    }
    load.weight_dtype = *wdt;
  }
  auto format = model::parse_load_format(format_name);
  if (!format) {
    std::fprintf(stderr, "--load-format: expected auto, safetensors or dummy, got '%s'\n", format_name.c_str());
    return 2;
  }
  load.format = *format;
  if (load.format == model::load_format::automatic)
    load.format =
        model::has_safetensors_checkpoint(config_dir) ? model::load_format::safetensors : model::load_format::dummy;
  const bool dummy = load.format == model::load_format::dummy;
  if (!save_dir.empty() && !dummy) {
    std::fprintf(stderr,
                 "--save-weights: %s has safetensors already (or --load-format safetensors); it writes dummy "
                 "weights only\n",
                 config_dir.c_str());
    return 2;
  }

  std::fprintf(stderr, "loading %s weights...\n", dummy ? "dummy" : "safetensors");
  model::shard_spec shard;
  auto t_load = clock_type::now();
  auto loaded = model::load_shard(config_dir, shard, load);
  double load_secs = seconds_since(t_load);
  if (!save_dir.empty()) {
    try {
      bench::write_checkpoint_dir(save_dir, config_dir, loaded.weights);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "--save-weights: %s\n", e.what());
      return 1;
    }
    std::printf("wrote %s: config.json and model.safetensors (%.3f GB, %zu tensors)\n", save_dir.c_str(),
                static_cast<double>(loaded.weights.total_bytes()) / 1e9, loaded.weights.size());
    return 0;
  }
  const auto cfg = loaded.config;
  // Bytes a decode step streams: every weight except the embedding table, which is only gathered (unless tied, in
  // which case the same table is read whole as lm_head).
  size_t weight_bytes = loaded.weights.total_bytes();
  size_t bytes_per_token = weight_bytes;
  if (!cfg.tie_word_embeddings)
    if (const auto* e = loaded.weights.find("model.embed_tokens.weight"))
      bytes_per_token -= e->nbytes();
  // MoE: a batch-1 token runs num_experts_per_tok of each layer's experts; the others are not read.
  size_t expert_bytes = 0;
  for (const auto& [name, t] : loaded.weights.tensors())
    if (name.find(".experts.") != std::string::npos)
      expert_bytes += t.nbytes();
  if (cfg.n_expert > 0)
    bytes_per_token -=
        expert_bytes - expert_bytes / static_cast<size_t>(cfg.n_expert) * static_cast<size_t>(cfg.n_expert_used);
  std::string stored_dtype = "?";
  dtype weight_type = dtype::bf16;
  if (const auto* e = loaded.weights.find("model.embed_tokens.weight")) {
    stored_dtype = std::string{dtype_name(e->type)};
    weight_type = e->type;
  }
  single_rank_collective comm;
  const cpu::cpu_backend::packed_bytes packed_before = be.packed_weight_bytes();
  model::llama_model llm{cfg, std::move(loaded.weights), shard, comm, be};
  // Packed weights are read as packed: compact panels (kernels/cpu/compact_panels.hpp) ~3/4 of their bf16 bytes.
  const cpu::cpu_backend::packed_bytes packed_after = be.packed_weight_bytes();
  const size_t bf16_bytes_per_token = bytes_per_token;
  bytes_per_token =
      bytes_per_token - (packed_after.bf16 - packed_before.bf16) + (packed_after.packed - packed_before.packed);
  // The cache serve would keep for these weights (--kv-cache-dtype auto: the model's dtype as loaded).
  const dtype kv_type = resolve_kv_cache_dtype(*kv_choice, load.weight_dtype.value_or(cfg.torch_dtype));
  llm.set_kv_cache_dtype(kv_type);
  const int64_t block_size = 16;

  const double load_before = load_average();
  std::vector<double> bandwidths, tps1s, tpsns, prefills, fractions, hogged, hog_ratios, hog_cores;
  // Batch-1 decode's time as the kernel pool saw it, per round: the share of the step inside the decode matmuls'
  // calls, and each pool thread's share computing their grains (what the rest of the step leaves idle).
  std::vector<double> call_shares;
  bool calls_timed = false;  // the decode's matmuls ran as takeover calls (packed bf16 weights: vdpbf16ps or AVX2)
  // ... and what the calls lost to their hand-out: the share of the step from a call's hand-out until its last thread
  // began (late start), and from the first thread running out of grains until the last finished (uneven end, partly
  // spent reading the next call ahead); the share of calls that had to wake a sleeping worker.
  std::vector<double> late_start_shares, uneven_end_shares, woken_call_shares;
  std::vector<std::vector<double>> compute_shares(static_cast<size_t>(pool.size()));
  // Each pool thread's share of the step reading ahead (takeover_work::idle), and a worker's share waiting for the
  // next call, spinning or asleep (the workers' mean): what neither a grain nor a read-ahead filled.
  std::vector<std::vector<double>> read_ahead_shares(static_cast<size_t>(pool.size()));
  std::vector<double> worker_wait_shares;
  bench::read_pattern best_pattern;
  double best_bandwidth = 0;
  // Batch-1 decode against the probe read beside it, per round (bench/paired_roofline.hpp), and those passes. The
  // probe and the passes beside the decode read one buffer; each point beside it reads the round's best pattern and
  // the reference pattern (bench::beside_reference_pattern) and keeps the higher.
  std::vector<double> paired_fractions;
  std::vector<std::vector<double>> beside_passes;
  std::vector<std::vector<double>> segment_rates;  // per round: each segment's weight bytes/s
  bench::probe_buffer probe_buffer{pool};
  for (int round = 0; round < rounds; ++round) {
    // The larger batch and prefill, before the probe with --batch1-last, else after batch 1.
    double tpsn = 0, prefill_tps = 0;
    auto measure_batch_and_prefill = [&] {
      std::fprintf(stderr, "round %d/%d: decode batch %ld...\n", round + 1, rounds, static_cast<long>(big_batch));
      tpsn = bench::decode_tokens_per_second(llm, big_batch, prompt_len, steps, block_size);
      if (prefill == 0)
        return;
      std::fprintf(stderr, "round %d/%d: prefill %ld tokens...\n", round + 1, rounds, static_cast<long>(prefill));
      prefill_tps = prefill_tokens_per_second(llm, prefill, block_size, prefill_reps);
    };
    if (batch1_last)
      measure_batch_and_prefill();
    std::fprintf(stderr, "round %d/%d: memory bandwidth probe...\n", round + 1, rounds);
    const bench::bandwidth_probe probe = bench::probe_read_bandwidth(probe_buffer);
    if (probe.bytes_per_s > best_bandwidth) {
      best_bandwidth = probe.bytes_per_s;
      best_pattern = probe.best;
    }
    // Batch 1 in segments, each compared with the probe read just before and just after it, as a run of its own: a
    // step right after a probe pass ran slower (on the 2-vCPU Xeon, 2026-12-04, the first step after one pass 8% on
    // average, after 5 s without reading the weights half speed), so steps timed between passes read 1.03-1.11x less
    // than the same steps in one run (4 pairs). The tokens/s and the shares of the step come from the run after it,
    // which no pass interrupts, as llama-bench's tg runs and a server's decode are not.
    if (segment_steps > 0) {
      std::fprintf(stderr, "round %d/%d: decode batch 1 in segments beside probe passes...\n", round + 1, rounds);
      bench::paired_roofline paired(
          [&, reference = bench::beside_reference_pattern()] {
            const double best = probe_buffer.pass(probe.best);
            return reference == probe.best ? best : std::max(best, probe_buffer.pass(reference));
          },
          std::min(segment_steps, batch1_steps), static_cast<double>(bytes_per_token));
      bench::decode_tokens_per_second(
          llm, 1, prompt_len, batch1_steps, block_size, {}, {}, [&] { paired.start(); },
          [&](int64_t step, double secs) { paired.after_step(step, secs); });
      paired_fractions.push_back(paired.fraction());
      beside_passes.push_back(paired.passes());
      segment_rates.push_back(paired.segment_bytes_per_s());
    }
    std::fprintf(stderr, "round %d/%d: decode batch 1...\n", round + 1, rounds);
    // The pool's timing covers the timed steps only (set_takeover_timing restarts its totals).
    const double tps1 = bench::decode_tokens_per_second(llm, 1, prompt_len, batch1_steps, block_size, {}, {},
                                                        [&] { pool.set_takeover_timing(true); });
    const thread_pool::takeover_timing timing = pool.takeover_timing_totals();
    pool.set_takeover_timing(false);
    const double decode_ns = static_cast<double>(batch1_steps) / tps1 * 1e9;  // the timed steps
    call_shares.push_back(static_cast<double>(timing.call_ns) / decode_ns);
    calls_timed = calls_timed || timing.calls > 0;
    late_start_shares.push_back(static_cast<double>(timing.late_start_ns) / decode_ns);
    uneven_end_shares.push_back(static_cast<double>(timing.uneven_end_ns) / decode_ns);
    woken_call_shares.push_back(timing.calls > 0 ? static_cast<double>(timing.woken_calls) / timing.calls : 0.0);
    for (size_t t = 0; t < compute_shares.size(); ++t) {
      compute_shares[t].push_back(static_cast<double>(timing.compute_ns[t]) / decode_ns);
      read_ahead_shares[t].push_back(static_cast<double>(timing.read_ahead_ns[t]) / decode_ns);
    }
    worker_wait_shares.push_back(static_cast<double>(timing.worker_wait_ns) / decode_ns /
                                 static_cast<double>(std::max(1, pool.size() - 1)));
    if (hog > 0) {
      std::fprintf(stderr, "round %d/%d: decode batch 1 beside %d busy processes...\n", round + 1, rounds, hog);
      const cpu_hog busy(hog);
      if (busy.running() != static_cast<size_t>(hog)) {
        std::fprintf(stderr, "--hog: started %zu of %d busy processes\n", busy.running(), hog);
        return 1;
      }
      const cpu_clock start;
      hogged.push_back(bench::decode_tokens_per_second(llm, 1, prompt_len, batch1_steps, block_size));
      hog_cores.push_back(start.cores_used());
      hog_ratios.push_back(hogged.back() / tps1);
    }
    if (!batch1_last)
      measure_batch_and_prefill();
    bandwidths.push_back(probe.bytes_per_s);
    tps1s.push_back(tps1);
    tpsns.push_back(tpsn);
    prefills.push_back(prefill_tps);
    fractions.push_back(tps1 / (probe.bytes_per_s / static_cast<double>(bytes_per_token)));
  }
  const double bandwidth = bench::median(bandwidths), tps1 = bench::median(tps1s), tpsn = bench::median(tpsns),
               prefill_tps = bench::median(prefills), fraction = bench::median(fractions);
  const double roofline = bandwidth / static_cast<double>(bytes_per_token);

  const double load_after = load_average();
  // After the runs, not at load: weights read in place from the checkpoint's mapping (row-major bf16 on AVX2) are only
  // mapped once a step has read them, and taken before that this read 25% where it was 99.7%.
  const double resident_huge = huge_page_share();
  std::printf("%-44s %16s\n", "metric", "value");
  std::printf("%-44s %16s\n", "load average (1 min), start / end",
              fmt::format("{:.2f} / {:.2f}", load_before, load_after).c_str());
  std::printf("%-44s %16s\n", "model", std::filesystem::path{config_dir}.filename().c_str());
  std::printf("%-44s %16s\n", "weights", dummy ? "dummy" : "safetensors");
  std::printf("%-44s %16s\n", "weight dtype", dtype_arg == "auto" ? stored_dtype.c_str() : dtype_arg.c_str());
  std::printf("%-44s %16s\n", "KV cache dtype", std::string{kv_cache_dtype_name(kv_type)}.c_str());
  std::printf("%-44s %16d\n", "threads", pool.size());
  std::printf("%-44s %16d\n", "rounds (medians below)", rounds);
  std::printf("%-44s %16.2f\n", "weights (GB)", static_cast<double>(weight_bytes) / 1e9);
  if (cfg.n_expert > 0)
    std::printf("%-44s %16s\n", "experts (active per token / per layer)",
                fmt::format("{} / {}", cfg.n_expert_used, cfg.n_expert).c_str());
  std::printf("%-44s %16.2f\n", "weight bytes read per decode token (GB)", static_cast<double>(bytes_per_token) / 1e9);
  std::printf("%-44s %16s\n", "  as packed / as bf16",
              fmt::format("{:.3f} / {:.3f}", static_cast<double>(bytes_per_token) / 1e9,
                          static_cast<double>(bf16_bytes_per_token) / 1e9)
                  .c_str());
  std::printf("%-44s %16.2f\n", "weight loading (s)", load_secs);
  std::printf("%-44s %15.1f%%\n", "resident memory in 2 MiB pages", 100.0 * resident_huge);
  if (cfg.n_expert > 0)
    for (int tp : {2, 4})
      if (tp <= cfg.n_expert && cfg.n_head % tp == 0)
        std::printf("%-44s %16s\n", fmt::format("weights per rank at tp {}: TP / EP (GB)", tp).c_str(),
                    fmt::format("{:.3f} / {:.3f}", max_rank_weight_bytes(cfg, tp, false, weight_type) / 1e9,
                                max_rank_weight_bytes(cfg, tp, true, weight_type) / 1e9)
                        .c_str());
  const bool lockstep_fits = cfg.n_expert >= 4 && cfg.n_head % 2 == 0;
  if (lockstep_fits)
    std::printf("%-44s %16.3f\n", "weights per rank, EP over dp 2 x tp 2 (GB)",
                max_rank_weight_bytes(cfg, 2, true, weight_type, 2) / 1e9);
  std::printf("%-44s %16.2f\n", "memory read bandwidth (GB/s)", bandwidth / 1e9);
  std::printf("%-44s %16s\n", "  best read pattern", best_pattern.name().c_str());
  std::printf("%-44s %16.2f\n", fmt::format("decode tokens/s, batch 1 ({} steps)", batch1_steps).c_str(), tps1);
  std::printf("%-44s %16.2f\n", fmt::format("decode tokens/s, batch {} ({} steps)", big_batch, steps).c_str(), tpsn);
  std::printf("%-44s %16.2f\n", fmt::format("prefill tokens/s, {}-token prompt", prefill).c_str(), prefill_tps);
  if (hog > 0) {
    std::printf("%-44s %16.2f\n", fmt::format("decode tokens/s, batch 1, beside {} busy", hog).c_str(),
                bench::median(hogged));
    std::printf("%-44s %15.1f%%\n", "  / quiet (median of per-round ratios)", 100.0 * bench::median(hog_ratios));
    std::printf("%-44s %15.1f%%\n", "  fair share: threads / (threads + hog)",
                100.0 * pool.size() / static_cast<double>(pool.size() + hog));
    std::printf("%-44s %16.2f\n", "  cores the engine got beside the hog", bench::median(hog_cores));
  }
  std::printf("%-44s %16.2f\n", "batch-1 roofline (tokens/s)", roofline);
  std::printf("%-44s %15.1f%%\n", "batch-1 decode / roofline", fraction * 100.0);
  // The probe's own passes beside the decode against the round's probe best: how much of its best the probe itself
  // read seconds later. On a VM whose bandwidth changes from pass to pass, the best of the probe's many passes is a
  // moment that a decode of many steps (or the probe read for as long) does not hold.
  // And the fastest segment of the decode and the fastest of those passes against the probe's best: what each read
  // when the machine was at its fastest during the decode.
  std::vector<double> passes_of_best, fastest_pass_of_best, fastest_segment_of_best;
  for (size_t r = 0; r < beside_passes.size() && r < bandwidths.size(); ++r) {
    passes_of_best.push_back(bench::median(beside_passes[r]) / bandwidths[r]);
    fastest_pass_of_best.push_back(*std::max_element(beside_passes[r].begin(), beside_passes[r].end()) / bandwidths[r]);
    fastest_segment_of_best.push_back(
        segment_rates[r].empty() ? 0.0
                                 : *std::max_element(segment_rates[r].begin(), segment_rates[r].end()) / bandwidths[r]);
  }
  if (segment_steps > 0) {
    std::printf("%-44s %15.1f%%\n", "batch-1 decode / probe read beside it", 100.0 * bench::median(paired_fractions));
    std::printf("%-44s %15.1f%%\n", "  probe passes beside it / the probe's best",
                100.0 * bench::median(passes_of_best));
    std::printf("%-44s %16s\n", "  the fastest pass, segment / probe's best",
                fmt::format("{:.1f}% {:.1f}%", 100.0 * bench::median(fastest_pass_of_best),
                            100.0 * bench::median(fastest_segment_of_best))
                    .c_str());
  }
  if (calls_timed)
    std::printf("%-44s %15.1f%%\n", "  share of the step in decode matmul calls", 100.0 * bench::median(call_shares));
  else
    std::printf("  share of the step in decode matmul calls: not timed (no packed bf16 weights: no takeover calls)\n");
  auto print_per_thread = [](const char* label, const std::vector<std::vector<double>>& per_thread) {
    std::string medians;
    for (const auto& shares : per_thread)
      medians += fmt::format("{}{:.1f}%", medians.empty() ? "" : " ", 100.0 * bench::median(shares));
    std::printf("%-44s %16s\n", label, medians.c_str());
  };
  print_per_thread("  share computing, per pool thread", compute_shares);
  print_per_thread("  share reading ahead, per pool thread", read_ahead_shares);
  if (pool.size() > 1)
    std::printf("%-44s %15.1f%%\n", "  share a worker waits for the next call",
                100.0 * bench::median(worker_wait_shares));
  std::printf(
      "%-44s %16s\n", "  share in calls' late starts, uneven ends",
      fmt::format("{:.1f}% {:.1f}%", 100.0 * bench::median(late_start_shares), 100.0 * bench::median(uneven_end_shares))
          .c_str());
  std::printf("%-44s %15.1f%%\n", "  calls that woke a sleeping worker", 100.0 * bench::median(woken_call_shares));
  std::printf("%-44s %16s\n", "per round: bandwidth GB/s, decode b1, b/roofline", "");
  for (size_t r = 0; r < bandwidths.size(); ++r)
    std::printf("  round %zu: %7.2f GB/s %8.2f tok/s %6.1f%%%s | batch %ld %8.2f tok/s | prefill %8.2f tok/s%s\n",
                r + 1, bandwidths[r] / 1e9, tps1s[r], fractions[r] * 100.0,
                segment_steps > 0
                    ? fmt::format(" (beside: {:.1f}%, passes {:.1f}-{:.1f} GB/s)", 100.0 * paired_fractions[r],
                                  *std::min_element(beside_passes[r].begin(), beside_passes[r].end()) / 1e9,
                                  *std::max_element(beside_passes[r].begin(), beside_passes[r].end()) / 1e9)
                          .c_str()
                    : "",
                static_cast<long>(big_batch), tpsns[r], prefills[r],
                hog > 0 ? fmt::format(" | beside the hog {:.2f} tok/s ({:.0f}%, {:.2f} cores)", hogged[r],
                                      100.0 * hog_ratios[r], hog_cores[r])
                              .c_str()
                        : "");

  json_writer w;
  w.begin_object();
  w.key("benchmark").value("cpu_decode");
  w.key("model").value(config_dir);
  w.key("weights").value(dummy ? "dummy" : "safetensors");
  w.key("dtype").value(dtype_arg == "auto" ? stored_dtype : dtype_arg);
  w.key("threads").value(pool.size());
  w.key("rounds").value(rounds);
  w.key("weight_bytes").value(static_cast<uint64_t>(weight_bytes));
  w.key("weight_bytes_per_token").value(static_cast<uint64_t>(bytes_per_token));
  w.key("bf16_weight_bytes_per_token").value(static_cast<uint64_t>(bf16_bytes_per_token));
  w.key("compact_panels").value(be.packed_weight_bytes().packed < be.packed_weight_bytes().bf16);
  w.key("n_expert").value(cfg.n_expert);
  w.key("n_expert_used").value(cfg.n_expert_used);
  w.key("expert_bytes").value(static_cast<uint64_t>(expert_bytes));
  if (lockstep_fits)
    w.key("rank_weight_bytes_ep_dp2_tp2")
        .value(static_cast<uint64_t>(max_rank_weight_bytes(cfg, 2, true, weight_type, 2)));
  w.key("kv_cache_dtype").value(std::string{kv_cache_dtype_name(kv_type)});
  w.key("resident_huge_page_share").value(resident_huge);
  w.key("memory_bandwidth_bytes_per_s").value(bandwidth);
  w.key("memory_bandwidth_best_pattern").value(best_pattern.name());
  // For bench_probe_passes to read the same patterns: the round's best, and the reference read beside it too.
  write_pattern_fields(w, "memory_bandwidth_best_pattern_fields", best_pattern);
  write_pattern_fields(w, "memory_bandwidth_reference_pattern_fields", bench::beside_reference_pattern());
  w.key("decode_batch1_tokens_per_s").value(tps1);
  w.key("decode_batch").value(big_batch);
  w.key("decode_batchN_tokens_per_s").value(tpsn);
  w.key("prefill_tokens").value(prefill);
  w.key("prefill_tokens_per_s").value(prefill_tps);
  w.key("roofline_batch1_tokens_per_s").value(roofline);
  w.key("batch1_fraction_of_roofline").value(fraction);
  w.key("paired_segment_steps").value(std::min(segment_steps, batch1_steps));
  if (segment_steps > 0) {
    w.key("batch1_fraction_of_probe_beside").value(bench::median(paired_fractions));
    w.key("probe_passes_beside_of_probe_best").value(bench::median(passes_of_best));
    w.key("fastest_probe_pass_beside_of_probe_best").value(bench::median(fastest_pass_of_best));
    w.key("batch1_fastest_segment_of_probe_best").value(bench::median(fastest_segment_of_best));
  }
  // The call shares time the takeover GEMVs over packed bf16 weights (vdpbf16ps, or AVX2's panel walk); other matmuls
  // are not timed (zeros).
  w.key("decode_matmul_calls_timed").value(calls_timed);
  w.key("decode_batch1_matmul_call_share").value(bench::median(call_shares));
  // A per-thread share: round r's figure of each pool thread, or (r < 0) each thread's median over the rounds.
  auto write_per_thread = [&w](const char* key, const std::vector<std::vector<double>>& per_thread, int64_t r) {
    w.key(key).begin_array();
    for (const auto& shares : per_thread)
      w.value(r < 0 ? bench::median(shares) : shares[static_cast<size_t>(r)]);
    w.end_array();
  };
  write_per_thread("decode_batch1_thread_compute_share", compute_shares, -1);
  write_per_thread("decode_batch1_read_ahead_share", read_ahead_shares, -1);
  w.key("decode_batch1_worker_wait_share").value(bench::median(worker_wait_shares));
  w.key("decode_batch1_late_start_share").value(bench::median(late_start_shares));
  w.key("decode_batch1_uneven_end_share").value(bench::median(uneven_end_shares));
  w.key("decode_batch1_woken_call_share").value(bench::median(woken_call_shares));
  w.key("decode_steps").value(steps);
  w.key("decode_batch1_steps").value(batch1_steps);
  w.key("hog_processes").value(hog);
  w.key("load_average_start").value(load_before);
  w.key("load_average_end").value(load_after);
  if (hog > 0) {
    w.key("decode_batch1_beside_hog_tokens_per_s").value(bench::median(hogged));
    w.key("decode_batch1_hog_over_quiet").value(bench::median(hog_ratios));
    w.key("decode_batch1_beside_hog_cores").value(bench::median(hog_cores));
  }
  w.key("per_round").begin_array();
  for (size_t r = 0; r < bandwidths.size(); ++r) {
    w.begin_object();
    w.key("memory_bandwidth_bytes_per_s").value(bandwidths[r]);
    w.key("decode_batch1_tokens_per_s").value(tps1s[r]);
    w.key("decode_batchN_tokens_per_s").value(tpsns[r]);
    w.key("prefill_tokens_per_s").value(prefills[r]);
    w.key("batch1_fraction_of_roofline").value(fractions[r]);
    w.key("decode_batch1_matmul_call_share").value(call_shares[r]);
    write_per_thread("decode_batch1_thread_compute_share", compute_shares, static_cast<int64_t>(r));
    write_per_thread("decode_batch1_read_ahead_share", read_ahead_shares, static_cast<int64_t>(r));
    w.key("decode_batch1_worker_wait_share").value(worker_wait_shares[r]);
    w.key("decode_batch1_late_start_share").value(late_start_shares[r]);
    w.key("decode_batch1_uneven_end_share").value(uneven_end_shares[r]);
    w.key("decode_batch1_woken_call_share").value(woken_call_shares[r]);
    if (segment_steps > 0) {
      w.key("batch1_fraction_of_probe_beside").value(paired_fractions[r]);
      w.key("probe_passes_beside_bytes_per_s").begin_array();
      for (double p : beside_passes[r])
        w.value(p);
      w.end_array();
      w.key("batch1_segment_bytes_per_s").begin_array();
      for (double b : segment_rates[r])
        w.value(b);
      w.end_array();
    }
    if (hog > 0) {
      w.key("decode_batch1_beside_hog_tokens_per_s").value(hogged[r]);
      w.key("decode_batch1_beside_hog_cores").value(hog_cores[r]);
    }
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return bench::write_json_result(json_path, w.str());
}
