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

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Expert-parallel load balancing on a skewed MoE workload, through actorllm::LLM"};
  std::string json_path = "bench/results/eplb.json";
  int tp = 4;
  int redundant = 4;
  int step_interval = 48;
  int window = 48;
  int batch = 16;
  int tokens_per_request = 8;
  int64_t n_embd = 256, n_ff = 512, n_layer = 4, n_expert = 8;
  int threads = 0;
  app.add_option("--tp", tp, "EP ranks (tensor_parallel_size with expert parallelism)")->capture_default_str();
  app.add_option("--redundant", redundant, "num_redundant_experts")->capture_default_str();
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
  // Experts 4 and 5 (both on EP rank 1 under the initial placement of 12 slots over 4 ranks) take most tokens.
  const std::vector<std::pair<int32_t, float>> hot{{4, 3.0f}, {5, 2.5f}, {6, 1.0f}};
  write_skewed_model(dir, n_embd, n_ff, n_layer, n_expert, hot, 7);

  actorllm::engine_config cfg;
  cfg.model = dir.string();
  cfg.tensor_parallel_size = tp;
  cfg.enable_expert_parallel = true;
  cfg.enable_eplb = true;
  cfg.eplb = actorllm::eplb_config{window, step_interval, redundant, true};
  cfg.kv_cache_memory = size_t{256} << 20;
  cfg.threads = threads;
  std::vector<snapshot> seen;
  std::vector<double> batch_seconds;
  {
    actorllm::LLM llm{cfg};
    std::mt19937 rng{1};
    actorllm::sampling_params p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = tokens_per_request;
    while (seen.size() < 2 && batch_seconds.size() < 200) {
      std::vector<actorllm::prompt> prompts;
      for (int i = 0; i < batch; ++i) {
        std::vector<int32_t> ids(16);
        for (auto& t : ids)
          t = static_cast<int32_t>(rng() % 512);
        prompts.emplace_back(ids);
      }
      const auto t0 = std::chrono::steady_clock::now();
      llm.generate(prompts, p);
      batch_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      const actorllm::engine_stats s = llm.stats();
      if (s.eplb.rearrangements > (seen.empty() ? 0 : seen.back().rearrangement))
        seen.push_back({s.eplb.rearrangements, s.eplb});
    }
  }
  fs::remove_all(dir);
  if (seen.size() < 2 || seen[0].rearrangement != 1 || seen[1].rearrangement != 2) {
    std::fprintf(stderr,
                 "the balancer's first two rearrangements were not seen one by one (batches too long for "
                 "--step-interval?)\n");
    return 1;
  }
  const actorllm::eplb_report& first = seen[0].eplb;
  const actorllm::eplb_report& second = seen[1].eplb;
  const double before = ratio(first.tokens_per_rank_max_before, first.tokens_per_rank_mean_before);
  const double predicted = ratio(first.tokens_per_rank_max_after, first.tokens_per_rank_mean_after);
  const double measured_after = ratio(second.tokens_per_rank_max_before, second.tokens_per_rank_mean_before);

  std::printf(
      "EPLB on a skewed Mixtral-shaped model (hidden %ld, %ld MoE layers, %ld experts, top-2), EP ranks %d, "
      "%d redundant experts, step_interval %d, window %d, batches of %d x %d tokens\n",
      static_cast<long>(n_embd), static_cast<long>(n_layer), static_cast<long>(n_expert), tp, redundant, step_interval,
      window, batch, tokens_per_request);
  std::printf("%-44s %12s %12s %10s\n", "tokens per EP rank (sum over layers)", "mean", "max", "max/mean");
  std::printf("%-44s %12.1f %12.1f %10.3f\n", "before (initial placement, measured)", first.tokens_per_rank_mean_before,
              first.tokens_per_rank_max_before, before);
  std::printf("%-44s %12.1f %12.1f %10.3f\n", "after (same load, new placement, predicted)",
              first.tokens_per_rank_mean_after, first.tokens_per_rank_max_after, predicted);
  std::printf("%-44s %12.1f %12.1f %10.3f\n", "after (new placement, measured)", second.tokens_per_rank_mean_before,
              second.tokens_per_rank_max_before, measured_after);
  std::printf("\nstall of a rearrangement: %.4f s (first), %.4f s (second)\n", first.last_stall_seconds,
              second.last_stall_seconds);

  actorllm::json_writer w;
  w.begin_object();
  w.key("benchmark").value("eplb");
  w.key("ep_ranks").value(tp);
  w.key("num_redundant_experts").value(redundant);
  w.key("step_interval").value(step_interval);
  w.key("window_size").value(window);
  w.key("hidden_size").value(n_embd);
  w.key("moe_layers").value(n_layer);
  w.key("experts").value(n_expert);
  w.key("before").begin_object();
  w.key("tokens_per_rank_mean").value(first.tokens_per_rank_mean_before);
  w.key("tokens_per_rank_max").value(first.tokens_per_rank_max_before);
  w.key("max_over_mean").value(before);
  w.end_object();
  w.key("after_predicted").begin_object();
  w.key("tokens_per_rank_mean").value(first.tokens_per_rank_mean_after);
  w.key("tokens_per_rank_max").value(first.tokens_per_rank_max_after);
  w.key("max_over_mean").value(predicted);
  w.end_object();
  w.key("after_measured").begin_object();
  w.key("tokens_per_rank_mean").value(second.tokens_per_rank_mean_before);
  w.key("tokens_per_rank_max").value(second.tokens_per_rank_max_before);
  w.key("max_over_mean").value(measured_after);
  w.end_object();
  w.key("stall_seconds").begin_array().value(first.last_stall_seconds).value(second.last_stall_seconds).end_array();
  w.key("batches").value(static_cast<int64_t>(batch_seconds.size()));
  w.end_object();
  return actorllm::bench::write_json_result(json_path, w.str());
}
