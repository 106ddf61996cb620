// Expert-parallel load balancing (--enable-eplb) on a skewed workload, through actorllm::LLM: a Mixtral-shaped model
// of seeded random weights whose routers send most tokens to two experts that start on the same rank (written as a
// safetensors checkpoint in a temporary directory), served with expert parallelism over tp 4 (EP ranks 4) and
// redundant expert slots. Batches of requests run until the balancer has rearranged twice; the engine's own record
// (engine_stats::eplb, what /metrics exports) gives, per rearrangement, the tokens per EP rank it measured since the
// previous one (max and mean, summed over the MoE layers) and how long the steps waited for it. The first
// rearrangement's "before" is the skew under vLLM's initial placement; the second's "before" is what the ranks
// measured under the first one's placement: the balance EPLB reached. Prints a table, writes JSON.
#include "bench/bench_json.hpp"
#include "model/model_config.hpp"
#include "model/weight_loader.hpp"
#include "model/weight_table.hpp"
#include "util/json_writer.hpp"

#include <actorllm/llm.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;

std::string config_json(int64_t n_embd, int64_t n_ff, int64_t n_layer, int64_t n_expert) {
  return fmt::format(R"({{"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": {},
      "intermediate_size": {}, "num_hidden_layers": {}, "num_attention_heads": 8, "num_key_value_heads": 4,
      "vocab_size": 512, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
      "num_local_experts": {}, "num_experts_per_tok": 2, "sliding_window": null, "tie_word_embeddings": false,
      "torch_dtype": "float32"}})",
                     n_embd, n_ff, n_layer, n_expert);
}

/// Writes `w` as dir/model.safetensors (f32 tensors, in name order).
void write_safetensors(const fs::path& file, const actorllm::model::model_weights& w) {
  std::string header = R"({"__metadata__":{"format":"pt"})";
  size_t offset = 0;
  for (const auto& [name, t] : w.tensors()) {
    header += fmt::format(R"(,"{}":{{"dtype":"F32","shape":[{}],"data_offsets":[{},{}]}})", name,
                          fmt::join(t.shape, ","), offset, offset + t.nbytes());
    offset += t.nbytes();
  }
  header += "}";
  while (header.size() % 8 != 0)
    header += ' ';
  std::ofstream out{file, std::ios::binary};
  const uint64_t len = header.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i)
    len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& [name, t] : w.tensors())
    out.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
  if (!out)
    throw std::runtime_error("cannot write " + file.string());
}

/// The skewed checkpoint: seeded random weights, then every token's hidden state given one dimension of constant
/// sign (a constant in that column of the embeddings) that the routers of `hot` experts weigh heavily, so that
/// those experts get most tokens in every MoE layer.
void write_skewed_model(const fs::path& dir, int64_t n_embd, int64_t n_ff, int64_t n_layer, int64_t n_expert,
                        const std::vector<std::pair<int32_t, float>>& hot, uint64_t seed) {
  using namespace actorllm::model;
  const std::string json = config_json(n_embd, n_ff, n_layer, n_expert);
  std::ofstream{dir / "config.json"} << json;
  const model_config cfg = load_model_config(dir);
  const shard_spec whole{0, 1};
  model_weights w = make_dummy_weights(cfg, llama_weight_table(cfg, whole), whole, actorllm::dtype::f32, seed);
  host_tensor* embed = w.find_mutable("model.embed_tokens.weight");
  for (int64_t row = 0; row < cfg.n_vocab; ++row)
    embed->data_as<float>()[row * n_embd] = 1.0f;  // column 0: the same sign for every token
  for (int64_t l = 0; l < n_layer; ++l) {
    host_tensor* router = w.find_mutable(fmt::format("model.layers.{}.block_sparse_moe.gate.weight", l));
    for (auto [e, strength] : hot)
      router->data_as<float>()[e * n_embd] += strength;
  }
  write_safetensors(dir / "model.safetensors", w);
}

struct snapshot {
  uint64_t rearrangement = 0;
  actorllm::eplb_report eplb;
};

double ratio(double max, double mean) { return mean > 0 ? max / mean : 0.0; }

/// One run of the engine with `redundant` redundant experts until its first two rearrangements.
struct run_result {
  int redundant = 0;
  actorllm::eplb_report first, second;
  int64_t batches = 0;
};

std::optional<run_result> run_setting(const fs::path& dir, int tp, int redundant, int step_interval, int window,
                                      int batch, int tokens_per_request, int threads) {
  actorllm::engine_config cfg;
  cfg.model = dir.string();
  cfg.tensor_parallel_size = tp;
  cfg.enable_expert_parallel = true;
  cfg.enable_eplb = true;
  cfg.eplb = actorllm::eplb_config{window, step_interval, redundant, true};
  cfg.kv_cache_memory = size_t{256} << 20;
  cfg.threads = threads;
  std::vector<snapshot> seen;
  int64_t batches = 0;
  actorllm::LLM llm{cfg};
  std::mt19937 rng{1};  // the same prompts for every setting
  actorllm::sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = tokens_per_request;
  while (seen.size() < 2 && batches < 200) {
    std::vector<actorllm::prompt> prompts;
    for (int i = 0; i < batch; ++i) {
      std::vector<int32_t> ids(16);
      for (auto& t : ids)
        t = static_cast<int32_t>(rng() % 512);
      prompts.emplace_back(ids);
    }
    llm.generate(prompts, p);
    ++batches;
    const actorllm::engine_stats s = llm.stats();
    if (s.eplb.rearrangements > (seen.empty() ? 0 : seen.back().rearrangement))
      seen.push_back({s.eplb.rearrangements, s.eplb});
  }
  if (seen.size() < 2 || seen[0].rearrangement != 1 || seen[1].rearrangement != 2)
    return std::nullopt;
  return run_result{redundant, seen[0].eplb, seen[1].eplb, batches};
}

/// Without EPLB: vLLM's contiguous placement (rank r holds experts [r × n / ep, (r + 1) × n / ep)), tokens per rank
/// from the engine's per-expert counts (summed over the layers) after `batches` batches of the same prompts.
std::pair<double, double> static_placement_load(const fs::path& dir, int tp, int64_t n_expert, int64_t batches,
                                                int batch, int tokens_per_request, int threads) {
  actorllm::engine_config cfg;
  cfg.model = dir.string();
  cfg.tensor_parallel_size = tp;
  cfg.enable_expert_parallel = true;
  cfg.kv_cache_memory = size_t{256} << 20;
  cfg.threads = threads;
  actorllm::LLM llm{cfg};
  std::mt19937 rng{1};
  actorllm::sampling_params p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = tokens_per_request;
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<actorllm::prompt> prompts;
    for (int i = 0; i < batch; ++i) {
      std::vector<int32_t> ids(16);
      for (auto& t : ids)
        t = static_cast<int32_t>(rng() % 512);
      prompts.emplace_back(ids);
    }
    llm.generate(prompts, p);
  }
  const auto tokens = llm.stats().expert_tokens;
  std::vector<double> per_rank(static_cast<size_t>(tp), 0.0);
  for (int64_t e = 0; e < static_cast<int64_t>(tokens.size()); ++e)
    per_rank[static_cast<size_t>(e * tp / n_expert)] += static_cast<double>(tokens[static_cast<size_t>(e)]);
  double sum = 0.0, max = 0.0;
  for (double x : per_rank) {
    sum += x;
    max = std::max(max, x);
  }
  return {sum / tp, max};
}

void write_side(actorllm::json_writer& w, const char* key, double mean, double max) {
  w.key(key).begin_object();
  w.key("tokens_per_rank_mean").value(mean);
  w.key("tokens_per_rank_max").value(max);
  w.key("max_over_mean").value(ratio(max, mean));
  w.end_object();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Expert-parallel load balancing on a skewed MoE workload, through actorllm::LLM"};
  std::string json_path = "bench/results/eplb.json";
  int tp = 4;
  std::vector<int> redundant_counts{4, 8, 12};
  int step_interval = 48;
  int window = 48;
  int batch = 16;
  int tokens_per_request = 8;
  int64_t n_embd = 256, n_ff = 512, n_layer = 4, n_expert = 8;
  int threads = 0;
  app.add_option("--tp", tp, "EP ranks (tensor_parallel_size with expert parallelism)")->capture_default_str();
  app.add_option("--redundant", redundant_counts, "num_redundant_experts settings, one run each")
      ->capture_default_str();
  app.add_option("--step-interval", step_interval, "eplb step_interval")->capture_default_str();
  app.add_option("--window", window, "eplb window_size")->capture_default_str();
  app.add_option("--batch", batch, "Requests per batch")->capture_default_str();
  app.add_option("--tokens", tokens_per_request, "Tokens generated per request")->capture_default_str();
  app.add_option("--hidden", n_embd, "hidden_size")->capture_default_str();
  app.add_option("--layers", n_layer, "num_hidden_layers (all MoE)")->capture_default_str();
  app.add_option("--threads", threads, "Kernel threads (default: all cores)");
  app.add_option("--json", json_path, "Where to write the JSON results")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const fs::path dir = fs::temp_directory_path() / fmt::format("actorllm-bench-eplb-{}", ::getpid());
  fs::create_directories(dir);
  // Experts 4, 5 and 6 take most tokens (4 and 5 on the same EP rank under the initial placement of 12 slots).
  const std::vector<std::pair<int32_t, float>> hot{{4, 3.0f}, {5, 2.5f}, {6, 1.0f}};
  write_skewed_model(dir, n_embd, n_ff, n_layer, n_expert, hot, 7);
  std::vector<run_result> results;
  for (int redundant : redundant_counts) {
    auto r = run_setting(dir, tp, redundant, step_interval, window, batch, tokens_per_request, threads);
    if (!r) {
      fs::remove_all(dir);
      std::fprintf(stderr,
                   "redundant %d: the balancer's first two rearrangements were not seen one by one (batches too long "
                   "for --step-interval?)\n",
                   redundant);
      return 1;
    }
    results.push_back(*r);
  }
  const auto [static_mean, static_max] =
      static_placement_load(dir, tp, n_expert, results.front().batches, batch, tokens_per_request, threads);
  fs::remove_all(dir);

  std::printf(
      "EPLB on a skewed Mixtral-shaped model (hidden %ld, %ld MoE layers, %ld experts, top-2; three hot experts), EP "
      "ranks %d, step_interval %d, window %d, batches of %d x %d tokens. Tokens per EP rank summed over the layers, "
      "max/mean: before = measured under the initial placement (slot s holds expert s mod %ld), predicted = the same "
      "load under the new placement, after = measured under it until the next rearrangement.\n",
      static_cast<long>(n_embd), static_cast<long>(n_layer), static_cast<long>(n_expert), tp, step_interval, window,
      batch, tokens_per_request, static_cast<long>(n_expert));
  std::printf("%10s %10s %10s %10s %10s %12s\n", "redundant", "slots/rank", "before", "predicted", "after",
              "stall (s)");
  std::printf("%10s %10ld %10.3f %10s %10s %12s   (EPLB off: contiguous placement, same prompts)\n", "off",
              static_cast<long>(n_expert / tp), ratio(static_max, static_mean), "-", "-", "-");
  for (const run_result& r : results)
    std::printf(
        "%10d %10ld %10.3f %10.3f %10.3f %12.4f\n", r.redundant, static_cast<long>((n_expert + r.redundant) / tp),
        ratio(r.first.tokens_per_rank_max_before, r.first.tokens_per_rank_mean_before),
        ratio(r.first.tokens_per_rank_max_after, r.first.tokens_per_rank_mean_after),
        ratio(r.second.tokens_per_rank_max_before, r.second.tokens_per_rank_mean_before), r.first.last_stall_seconds);

  actorllm::json_writer w;
  w.begin_object();
  w.key("benchmark").value("eplb");
  w.key("ep_ranks").value(tp);
  w.key("step_interval").value(step_interval);
  w.key("window_size").value(window);
  w.key("hidden_size").value(n_embd);
  w.key("moe_layers").value(n_layer);
  w.key("experts").value(n_expert);
  write_side(w, "eplb_off", static_mean, static_max);
  w.key("runs").begin_array();
  for (const run_result& r : results) {
    w.begin_object();
    w.key("num_redundant_experts").value(r.redundant);
    write_side(w, "before", r.first.tokens_per_rank_mean_before, r.first.tokens_per_rank_max_before);
    write_side(w, "after_predicted", r.first.tokens_per_rank_mean_after, r.first.tokens_per_rank_max_after);
    write_side(w, "after_measured", r.second.tokens_per_rank_mean_before, r.second.tokens_per_rank_max_before);
    w.key("stall_seconds")
        .begin_array()
        .value(r.first.last_stall_seconds)
        .value(r.second.last_stall_seconds)
        .end_array();
    w.key("batches").value(r.batches);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return actorllm::bench::write_json_result(json_path, w.str());
}
