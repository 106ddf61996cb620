// Decode context parallelism on the CPU: the decode step time of one sequence at --context tokens (32K by default)
// for dcp 1, 2 and 4 at tensor_parallel_size 4 (a small shape with one kv head, so dcp 1 keeps a copy of the whole
// cache on each of the 4 ranks and dcp 4 a quarter of it on each), and the longest context one rank's --kv-memory
// holds at each size. The ranks are threads of this process (the uni executor's shared-memory collectives); the
// caches are filled with seeded values up to the context instead of a prefill, which the step time does not depend
// on. Then the prefill of one --prefill-tokens prompt through actorllm::LLM with prefill context parallelism 1 and 2
// (tp 1; the same kernel threads in all, split over the ranks). The sizes alternate within each of --rounds rounds
// beside the memory-bandwidth probe. Prints a table, writes JSON (--json).
#include "actorllm/llm.hpp"
#include "bench/bench_json.hpp"
#include "bench/bench_support.hpp"
#include "bench/memory_bandwidth.hpp"
#include "comm/shared_memory_collective.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/llama_model.hpp"
#include "model/model_source.hpp"
#include "util/json_writer.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
namespace fs = std::filesystem;

namespace {

constexpr int tp = 4;

/// One rank: its backend, its end of the TP group, its slice of the model and its cache.
struct rank_state {
  std::unique_ptr<cpu::cpu_backend> be;
  std::unique_ptr<comm::shared_memory_collective> comm;
  std::unique_ptr<model::llama_model> model;
  std::unique_ptr<model::kv_cache> cache;
};

/// The 4 ranks at one dcp size, their block table for the sequence, and what was measured.
struct setup {
  int dcp = 1;
  std::shared_ptr<comm::shared_memory_group> group;
  std::vector<rank_state> ranks;
  std::vector<int32_t> table;
  int64_t kv_bytes_per_rank = 0;  ///< the sequence's cache on one rank
  int64_t longest_context = 0;    ///< positions --kv-memory holds per rank
  std::vector<double> step_ms;
};

setup build(const fs::path& dir, int dcp, int64_t context, int threads_per_rank, size_t kv_memory) {
  setup s;
  s.dcp = dcp;
  s.group = std::make_shared<comm::shared_memory_group>(tp);
  model::load_options load;
  load.format = model::load_format::dummy;
  const int64_t block_size = 16 * dcp;  // the scheduler's block: 16 slots on each rank of the group
  const int64_t n_blocks = (context + 1 + block_size - 1) / block_size;
  for (int32_t b = 0; b < n_blocks; ++b)
    s.table.push_back(b);
  std::mt19937 rng{static_cast<uint32_t>(dcp)};
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int r = 0; r < tp; ++r) {
    rank_state st;
    st.be = std::make_unique<cpu::cpu_backend>(threads_per_rank);
    st.comm = std::make_unique<comm::shared_memory_collective>(s.group, r);
    model::shard_spec shard;
    shard.tp_rank = r;
    shard.tp_size = tp;
    shard.dcp_size = dcp;
    auto loaded = model::load_shard(dir, shard, load);
    st.model = std::make_unique<model::llama_model>(loaded.config, std::move(loaded.weights), shard, *st.comm, *st.be);
    const model::kv_cache_shape shape = st.model->cache_shape(block_size);
    st.cache = std::make_unique<model::kv_cache>(*st.be, shape, n_blocks);
    // Every slot of every layer gets a value: the positions before the context stand for a prefill's keys.
    for (int64_t l = 0; l < shape.n_layer; ++l) {
      const kv_layer layer = st.cache->layer(l);
      for (const tensor* t : {&layer.k, &layer.v}) {
        float* p = t->data_as<float>();
        for (int64_t i = 0; i < t->numel(); ++i)
          p[i] = u(rng);
      }
    }
    if (r == 0) {
      s.kv_bytes_per_rank = static_cast<int64_t>(shape.bytes_per_block()) * n_blocks;
      s.longest_context = shape.blocks_in(kv_memory) * shape.positions_per_block();
    }
    s.ranks.push_back(std::move(st));
  }
  return s;
}

/// Milliseconds per decode step at position `context`, over `steps` steps (every rank in its own thread).
double time_steps(setup& s, int64_t context, int steps) {
  std::vector<std::thread> threads;
  const auto t0 = std::chrono::steady_clock::now();
  for (rank_state& st : s.ranks)
    threads.emplace_back([&st, &s, context, steps] {
      for (int i = 0; i < steps; ++i) {
        model::forward_batch batch;
        const int32_t token[1] = {5 + i};
        batch.add_sequence(token, static_cast<int32_t>(context), s.table, true);
        (void)st.model->forward(batch, *st.cache);
      }
    });
  for (auto& t : threads)
    t.join();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode context parallelism on the CPU: decode step time at a long context for dcp 1/2/4 at tp 4"};
  int64_t context = 32768, hidden = 512, head_dim = 64, layers = 2;
  int rounds = 5, steps = 8, threads_per_rank = 1;
  int64_t prefill_tokens = 4096;
  std::string kv_memory_text = "1073741824";
  std::string json_path = "bench/results/context_parallel.json";
  app.add_option("--context", context, "Tokens of context before the timed decode steps")->capture_default_str();
  app.add_option("--hidden", hidden, "hidden_size (heads of --head-dim, one kv head)")->capture_default_str();
  app.add_option("--head-dim", head_dim, "head_dim")->capture_default_str();
  app.add_option("--layers", layers, "num_hidden_layers")->capture_default_str();
  app.add_option("--steps", steps, "Timed decode steps per measurement")->capture_default_str();
  app.add_option("--rounds", rounds, "Alternated rounds")->capture_default_str();
  app.add_option("--threads-per-rank", threads_per_rank, "Kernel threads of each of the 4 ranks")
      ->capture_default_str();
  app.add_option("--kv-memory", kv_memory_text, "KV-cache bytes per rank for the longest-context column")
      ->capture_default_str();
  app.add_option("--prefill-tokens", prefill_tokens, "Prompt tokens of the prefill comparison (0: skip it)")
      ->capture_default_str();
  app.add_option("--json", json_path, "Where to write the JSON result")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const size_t kv_memory = std::stoull(kv_memory_text);
  const int64_t n_head = hidden / head_dim;
  if (context < 1 || rounds < 1 || steps < 1 || hidden % head_dim != 0 || n_head % tp != 0) {
    std::fprintf(stderr, "--context, --rounds and --steps must be positive, and hidden / head_dim a multiple of 4\n");
    return 2;
  }

  const fs::path dir = fs::temp_directory_path() / fmt::format("actorllm-bench-dcp-{}", ::getpid());
  const bench::scoped_dir remove_dir{dir};
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << fmt::format(
      R"({{"architectures": ["LlamaForCausalLM"], "hidden_size": {}, "intermediate_size": {}, "num_hidden_layers": {},
      "num_attention_heads": {}, "num_key_value_heads": 1, "head_dim": {}, "vocab_size": 512,
      "max_position_embeddings": {}, "torch_dtype": "float32"}})",
      hidden, 2 * hidden, layers, n_head, head_dim, std::max<int64_t>(context + 64, 4096));

  std::fprintf(stderr, "building tp 4 x dcp 1, 2, 4 with %ld tokens of cache...\n", static_cast<long>(context));
  std::vector<setup> setups;
  for (int dcp : {1, 2, 4})
    setups.push_back(build(dir, dcp, context, threads_per_rank, kv_memory));

  // The prefill comparison: one engine per pcp size, every kernel thread of the machine in each.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  struct prefill_run {
    int pcp = 1;
    std::unique_ptr<LLM> llm;
    std::vector<double> seconds;
  };
  std::vector<prefill_run> prefills;
  if (prefill_tokens > 0)
    for (int pcp : {1, 2}) {
      engine_config c;
      c.model = dir.string();
      c.load_format = "dummy";
      c.prefill_context_parallel_size = pcp;
      c.threads = cores;
      c.enable_prefix_caching = false;
      c.max_num_batched_tokens = static_cast<int32_t>(std::min<int64_t>(prefill_tokens, 8192));
      c.kv_cache_memory = size_t{1} << 30;
      prefills.push_back({pcp, std::make_unique<LLM>(c), {}});
    }
  auto prefill_seconds = [&](LLM& llm, int round) {
    std::vector<int32_t> ids(static_cast<size_t>(prefill_tokens));
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<int32_t>(3 + (i * 31 + static_cast<size_t>(round) * 7) % 500);
    sampling_params p;
    p.max_tokens = 1;
    p.temperature = 0;
    const auto t0 = std::chrono::steady_clock::now();
    (void)llm.generate(prompt{ids}, p);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (prefill_run& r : prefills)
    (void)prefill_seconds(*r.llm, -1);  // warm

  thread_pool probe_pool(cores);
  std::vector<double> bandwidths;
  for (int round = 0; round < rounds; ++round) {
    bandwidths.push_back(bench::probe_read_bandwidth(probe_pool, size_t{256} << 20, 2).bytes_per_s);
    for (setup& s : setups) {
      (void)time_steps(s, context, 1);  // warm
      s.step_ms.push_back(time_steps(s, context, steps));
    }
    for (prefill_run& r : prefills)
      r.seconds.push_back(prefill_seconds(*r.llm, round));
    std::fprintf(stderr, "round %d of %d done\n", round + 1, rounds);
  }

  std::printf(
      "decode context parallel, tp 4, %ld tokens of context, hidden %ld, %ld heads of %ld, 1 kv head, %ld "
      "layers, %d thread(s) per rank, %d rounds\n",
      static_cast<long>(context), static_cast<long>(hidden), static_cast<long>(n_head), static_cast<long>(head_dim),
      static_cast<long>(layers), threads_per_rank, rounds);
  std::printf("bandwidth probe (median): %.1f GB/s\n", bench::median(bandwidths) / 1e9);
  std::printf("%-6s %16s %14s %14s %26s\n", "dcp", "step ms (median)", "vs dcp 1", "KV MiB/rank",
              fmt::format("longest context in {} MiB", kv_memory >> 20).c_str());
  const double base = bench::median(setups.front().step_ms);
  for (const setup& s : setups)
    std::printf("%-6d %16.2f %13.2fx %14.1f %26ld\n", s.dcp, bench::median(s.step_ms), base / bench::median(s.step_ms),
                static_cast<double>(s.kv_bytes_per_rank) / (1 << 20), static_cast<long>(s.longest_context));

  if (!prefills.empty()) {
    std::printf("prefill of %ld tokens, tp 1, %d kernel threads in all\n", static_cast<long>(prefill_tokens), cores);
    std::printf("%-6s %16s %14s %14s\n", "pcp", "seconds (median)", "tokens/s", "vs pcp 1");
    for (const prefill_run& r : prefills)
      std::printf("%-6d %16.3f %14.0f %13.2fx\n", r.pcp, bench::median(r.seconds),
                  static_cast<double>(prefill_tokens) / bench::median(r.seconds),
                  bench::median(prefills.front().seconds) / bench::median(r.seconds));
  }

  json_writer w;
  w.begin_object();
  w.key("bench").value("context_parallel");
  w.key("context").value(context);
  w.key("tp").value(tp);
  w.key("hidden").value(hidden);
  w.key("head_dim").value(head_dim);
  w.key("layers").value(layers);
  w.key("rounds").value(rounds);
  w.key("bandwidth_gb_s").value(bench::median(bandwidths) / 1e9);
  w.key("kv_memory_bytes").value(static_cast<int64_t>(kv_memory));
  w.key("sizes").begin_array();
  for (const setup& s : setups) {
    w.begin_object();
    w.key("dcp").value(s.dcp);
    w.key("step_ms").value(bench::median(s.step_ms));
    w.key("speedup_vs_dcp1").value(base / bench::median(s.step_ms));
    w.key("kv_bytes_per_rank").value(s.kv_bytes_per_rank);
    w.key("longest_context").value(s.longest_context);
    w.end_object();
  }
  w.end_array();
  w.key("prefill_tokens").value(prefill_tokens);
  w.key("prefill").begin_array();
  for (const prefill_run& r : prefills) {
    w.begin_object();
    w.key("pcp").value(r.pcp);
    w.key("seconds").value(bench::median(r.seconds));
    w.key("speedup_vs_pcp1").value(bench::median(prefills.front().seconds) / bench::median(r.seconds));
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return bench::write_json_result(json_path, w.str());
}
