// GPU benchmark and 8B parity at a real model shape with dummy weights (scripts/gpu_check.sh runs it on a GPU
// machine): the device's copy bandwidth; batch-1 decode tokens/s and its share of the bandwidth roofline (weight
// bytes read per token ÷ measured bandwidth); output tokens/s through the engine (actorllm::LLM) for batches of
// 64 and 256 at 128 in / 128 out and 1024 / 1024; and, with --parity, the CUDA forward (bf16 weights) against the
// CPU's (the same bf16 weights, f32 activations) on identical dummy weights: top-1 agreement and error norms.
// First, the GEMVs at the 8B shapes (int4 g128, int8 g128 and per channel; bf16 alone, gate+up with SiLU and q/k/v
// in one launch): weight bytes read per second, beside the copy bandwidth, and the add + RMSNorm of a 4096-wide row
// at batch 1 and 64 (--gemv-only: only these, no model).
// Prints a table, writes JSON. With --profile it runs no benchmark: one eager decode step at each of the given batch
// sizes inside a profiler region (kernels/cuda/profile_range.hpp) for `ncu --profile-from-start off`, which
// scripts/gpu_check.sh's profile step turns into a table per kernel kind. Without a GPU it says "skipped: no GPU" and
// exits 77.
#include "actorllm/llm.hpp"
#include "bench/bench_json.hpp"
#include "bench/parity/logit_rows.hpp"
#include "comm/collective.hpp"
#include "kernels/backend.hpp"
#include "kernels/device.hpp"
#include "kernels/kv_cache_dtype.hpp"
#include "kernels/quantized_linear.hpp"
#include "kernels/sampling.hpp"
#include "model/decode_graph_plan.hpp"
#include "model/decode_graphs.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/model_source.hpp"
#include "util/json_writer.hpp"
#include "util/thread_pool.hpp"
#ifdef ACTORLLM_HAVE_CUDA
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/profile_range.hpp"
#endif

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using namespace actorllm;
using bench::argmax;
using bench::load_dummy;
using bench::prompt_of;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// How a batch-1 step picks its token: the whole logits row downloaded and its argmax taken on the host (the figure
// kept across runs), or (graph replays only) the backend's sampler on the device with a default request's settings
// (temperature 1, a seeded generator: what serving runs, a token and its logprob coming back).
enum class pick_token { host_argmax, device_sampler };

// Batch-1 decode: a short prompt, then `steps` timed steps, each eager or (graphs) a replay of a batch-1 decode
// graph as the engine captures it (block tables as wide as max_position_embeddings). Returns tokens/s.
double decode_batch1(model::llama_model& llm, int64_t prompt_len, int64_t steps, bool graphs,
                     pick_token pick = pick_token::host_argmax) {
  if (pick == pick_token::device_sampler && !graphs)
    throw std::invalid_argument("decode_batch1: the device sampler is timed on graph replays only");
  const int64_t block_size = 16, ctx = prompt_len + steps + 8;
  const int64_t blocks = (ctx + block_size - 1) / block_size;
  model::kv_cache cache{llm.device_backend(), llm.cache_shape(block_size), blocks};
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  const int64_t vocab = llm.config().n_vocab;
  model::forward_batch fb;
  fb.add_sequence(prompt_of(0, prompt_len, vocab), 0, table, true);
  std::vector<float> logits = llm.forward(fb, cache);
  int32_t last = argmax(logits.data(), vocab);
  std::unique_ptr<model::decode_graphs> decode_graphs;
  if (graphs)
    decode_graphs =
        std::make_unique<model::decode_graphs>(llm.device_backend(), llm, cache, std::vector<int32_t>{1},
                                               (llm.config().max_position_embeddings + block_size - 1) / block_size);
  const ops::sampling_params params;  // a default request: temperature 1, no top-k/top-p
  ops::sampler_rng rng{1234};
  const std::vector<int32_t> prompt_ids = prompt_of(0, prompt_len, vocab);
  std::vector<int32_t> output_ids;
  std::vector<ops::sample_result> sampled(1);
  clock_type::time_point t0;
  for (int64_t step = -4; step < steps; ++step) {  // 4 untimed warm-up steps
    if (step == 0)
      t0 = clock_type::now();
    model::forward_batch d;
    int32_t tok[1] = {last};
    d.add_sequence(tok, static_cast<int32_t>(prompt_len + step + 4), table, true);
    if (!decode_graphs) {
      logits = llm.forward(d, cache);
      last = argmax(logits.data(), vocab);
      continue;
    }
    const tensor out = decode_graphs->replay(d);
    if (pick == pick_token::device_sampler) {
      const ops::sample_row row{&params, prompt_ids, output_ids, &rng};
      llm.device_backend().sample(out, std::span<const ops::sample_row>(&row, 1), sampled);
      last = sampled[0].token;
      output_ids.push_back(last);
    } else {
      llm.device_backend().download(out, logits.data(), static_cast<size_t>(vocab) * sizeof(float));
      last = argmax(logits.data(), vocab);
    }
  }
  return static_cast<double>(steps) / seconds_since(t0);
}

// One eager decode step of `batch` sequences (16-token prompts, prefilled and decoded twice untimed first) inside a
// profiler region: what ncu measures kernel by kernel.
void profile_decode_step(model::llama_model& llm, int64_t batch) {
  const int64_t block_size = 16, prompt_len = 16, warm = 2;
  const int64_t blocks_per_seq = (prompt_len + warm + 1 + block_size - 1) / block_size;
  model::kv_cache cache{llm.device_backend(), llm.cache_shape(block_size), batch * blocks_per_seq};
  const int64_t vocab = llm.config().n_vocab;
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  std::vector<int32_t> last(static_cast<size_t>(batch));
  model::forward_batch prefill;
  for (int64_t s = 0; s < batch; ++s) {
    tables[static_cast<size_t>(s)].resize(static_cast<size_t>(blocks_per_seq));
    std::iota(tables[static_cast<size_t>(s)].begin(), tables[static_cast<size_t>(s)].end(),
              static_cast<int32_t>(s * blocks_per_seq));
    prefill.add_sequence(prompt_of(s, prompt_len, vocab), 0, tables[static_cast<size_t>(s)], true);
  }
  std::vector<float> logits = llm.forward(prefill, cache);
  for (int64_t step = 0; step <= warm; ++step) {
    for (int64_t s = 0; s < batch; ++s)
      last[static_cast<size_t>(s)] = argmax(logits.data() + s * vocab, vocab);
    model::forward_batch d;
    for (int64_t s = 0; s < batch; ++s)
      d.add_sequence(std::span<const int32_t>(&last[static_cast<size_t>(s)], 1),
                     static_cast<int32_t>(prompt_len + step), tables[static_cast<size_t>(s)], true);
    if (step < warm) {
      logits = llm.forward(d, cache);
      continue;
    }
#ifdef ACTORLLM_HAVE_CUDA
    const cuda::profile_range region(llm.device_backend().where().index);
    logits = llm.forward(d, cache);
#endif
  }
  std::fprintf(stderr, "profiled one decode step at batch %ld\n", static_cast<long>(batch));
}

// One GEMV measurement: y = x w^T at `tokens` tokens over a weight of one format and shape. "bf16 gate+up": two
// bf16 weights of the shape through matmul_silu_gate (one launch at up to 8 tokens); "bf16 q/k/v": three through
// matmul_group (one launch), the shape being each weight's.
struct gemv_case {
  std::string format;  // "int4 g128", "int8 g128", "int8 per-channel", "bf16", "bf16 gate+up", "bf16 q/k/v"
  int64_t n_in = 0, n_out = 0, tokens = 0;
  size_t weight_bytes = 0;  // read per call: codes, scales and zero points (bf16: the weight)
  double seconds_per_call = 0.0;
  double bytes_per_s = 0.0;
};

// A weight of `format` [n_out, n_in] with random codes (or values), on the backend.
tensor gemv_weight(backend& be, const std::string& format, int64_t n_out, int64_t n_in, uint64_t seed, size_t& bytes) {
  std::mt19937_64 gen{seed};
  if (format.rfind("bf16", 0) == 0) {
    tensor host = make_host_tensor(dtype::bf16, {n_out, n_in});
    auto* v = host.data_as<uint16_t>();
    for (int64_t i = 0; i < host.numel(); ++i)  // small values around +-0.01: any bits do for a bandwidth test
      v[i] = static_cast<uint16_t>(0x3c00u | (gen() & 0x80ffu));
    bytes = host.nbytes();
    return be.import_linear_weight(std::move(host));
  }
  quantized_linear q;
  q.bits = format.rfind("int4", 0) == 0 ? 4 : 8;
  q.n_out = n_out;
  q.n_in = n_in;
  q.group_size = format.find("g128") != std::string::npos ? 128 : n_in;
  q.codes.resize(static_cast<size_t>(n_out * n_in));
  for (size_t i = 0; i < q.codes.size(); i += 8) {
    const uint64_t r = gen();
    for (size_t b = 0; b < 8 && i + b < q.codes.size(); ++b)
      q.codes[i + b] = static_cast<uint8_t>((r >> (8 * b)) & (q.bits == 4 ? 0x0fu : 0xffu));
  }
  q.scales.assign(static_cast<size_t>(n_out * q.n_groups()), 0.01f);
  q.zeros.assign(q.scales.size(), static_cast<uint8_t>(q.bits == 4 ? 8 : 128));
  bytes = q.packed_bytes();
  return be.import_quantized_linear(q);
}

// Time per call of matmul at each token count over enough copies of the weight that they cycle through far more
// than the L2 holds (each call reads from DRAM), replayed from a CUDA graph (no host launch gaps between the calls).
std::vector<gemv_case> measure_gemv(backend& be, const std::string& format, int64_t n_in, int64_t n_out,
                                    std::initializer_list<int64_t> token_counts) {
  constexpr size_t cycled_bytes = size_t{128} << 20;  // 2.5 times the L2 of an H100 or H200
  size_t bytes = 0;
  std::vector<tensor> weights{gemv_weight(be, format, n_out, n_in, 1, bytes)};
  const size_t copies = std::max<size_t>(3, (cycled_bytes + bytes - 1) / bytes);
  size_t ignored = 0;
  while (weights.size() < copies)
    weights.push_back(gemv_weight(be, format, n_out, n_in, weights.size() + 1, ignored));
  // Weights read per call: one, or the gate and up pair, or q, k and v (copies of one shape: the bytes are the same).
  const size_t per_call = format == "bf16 gate+up" ? 2 : format == "bf16 q/k/v" ? 3 : 1;
  std::vector<gemv_case> out;
  for (int64_t tokens : token_counts) {
    gemv_case c{format, n_in, n_out, tokens, bytes * per_call};
    tensor x = be.alloc(dtype::f32, {tokens, n_in}), y = be.alloc(dtype::f32, {tokens, n_out}),
           y2 = be.alloc(dtype::f32, {tokens, n_out}), y3 = be.alloc(dtype::f32, {tokens, n_out});
    std::vector<float> xs(static_cast<size_t>(x.numel()));
    std::mt19937 gen{7};
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (float& v : xs)
      v = d(gen);
    be.upload(x, xs.data(), x.nbytes());
    const size_t calls = std::max<size_t>(copies, 64 / copies * copies);  // whole cycles, at least 64 calls
    auto record = [&] {
      for (size_t i = 0; i < calls; ++i) {
        const tensor& w0 = weights[i % copies];
        if (per_call == 2) {
          be.matmul_silu_gate(x, w0, weights[(i + 1) % copies], y2, y);
        } else if (per_call == 3) {
          const linear_out qkv[] = {
              {w0, tensor{}, y}, {weights[(i + 1) % copies], tensor{}, y2}, {weights[(i + 2) % copies], tensor{}, y3}};
          be.matmul_group(x, qkv);
        } else {
          be.matmul(x, w0, tensor{}, y);
        }
      }
    };
    be.use_graph_scratch(true);
    record();  // warm-up: sizes the graph scratch
    std::unique_ptr<op_graph> graph = be.capture_graph(record);
    be.use_graph_scratch(false);
    graph->replay();
    be.synchronize();
    constexpr int replays = 10;
    const auto t0 = clock_type::now();
    for (int r = 0; r < replays; ++r)
      graph->replay();
    be.synchronize();
    c.seconds_per_call = seconds_since(t0) / static_cast<double>(replays * calls);
    c.bytes_per_s = static_cast<double>(c.weight_bytes) / c.seconds_per_call;
    out.push_back(c);
  }
  return out;
}

// Microseconds per add_rms_norm of `rows` rows of `width` (bf16 weight, bf16 out: the decode layer's), replayed from
// a graph of 256 calls back to back (each call's residual is the last one's: they run one after another, as in a
// decode step; the graph hides the host's launch time, not the kernels' own start).
double measure_add_rms_norm(backend& be, int64_t rows, int64_t width) {
  tensor residual = be.alloc(dtype::f32, {rows, width}), delta = be.alloc(dtype::f32, {rows, width});
  tensor out = be.alloc(dtype::bf16, {rows, width});
  tensor host_w = make_host_tensor(dtype::bf16, {width});
  std::fill_n(host_w.data_as<uint16_t>(), width, uint16_t{0x3f80});  // 1.0
  const tensor weight = be.import_host(std::move(host_w));
  std::vector<float> values(static_cast<size_t>(rows * width), 0.001f);
  be.upload(residual, values.data(), residual.nbytes());
  be.upload(delta, values.data(), delta.nbytes());
  constexpr int calls = 256, replays = 20;
  auto record = [&] {
    for (int i = 0; i < calls; ++i)
      be.add_rms_norm(residual, delta, weight, 1e-5f, out);
  };
  be.use_graph_scratch(true);
  record();
  std::unique_ptr<op_graph> graph = be.capture_graph(record);
  be.use_graph_scratch(false);
  graph->replay();
  be.synchronize();
  const auto t0 = clock_type::now();
  for (int r = 0; r < replays; ++r)
    graph->replay();
  be.synchronize();
  return seconds_since(t0) / (calls * replays) * 1e6;
}

struct throughput_case {
  int64_t batch, input_len, output_len;
  double output_tokens_per_s = 0.0;
  double seconds = 0.0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPU benchmark (and 8B CUDA-vs-CPU parity) with dummy weights at a real model shape"};
  std::string config_dir = std::string{ACTORLLM_SOURCE_DIR} + "/bench/configs/llama-3.1-8b";
  std::string json_path = "bench/results/gpu.json";
  int64_t steps = 64;
  bool parity = false, throughput = true, gemv = true, gemv_only = false, gemv_sweep = false;
  double gpu_memory_utilization = 0.9;
  std::vector<std::string> case_specs{"64x128x128", "256x128x128", "64x1024x1024"};
  std::vector<int64_t> profile_batches;
  app.add_option("--config", config_dir, "Directory with the model's config.json")->capture_default_str();
  app.add_option("--decode-steps", steps, "Timed batch-1 decode steps")->capture_default_str();
  app.add_flag("--parity", parity, "Also compare the CUDA forward with the CPU's on identical weights");
  app.add_flag("--throughput,!--no-throughput", throughput, "Measure engine output throughput")->capture_default_str();
  app.add_flag("--gemv,!--no-gemv", gemv, "Measure the GEMV over quantized weights at the 8B shapes")
      ->capture_default_str();
  app.add_flag("--gemv-only", gemv_only, "Only the GEMV measurements and the copy bandwidth (no model)");
  app.add_flag("--gemv-sweep", gemv_sweep,
               "With the GEMV measurements: the bf16 GEMV at each loads-in-flight setting against cuBLAS, at 1, 2, 4 "
               "and 8 tokens over the 8B's o, q|k|v, gate|up and down shapes (what ACTORLLM_GEMV's default is chosen "
               "by)");
  app.add_option("--cases", case_specs, "Throughput runs as BATCHxINxOUT (sequences, prompt and output tokens)")
      ->capture_default_str();
  app.add_option("--profile", profile_batches,
                 "Only profile: one eager decode step at each of these batch sizes, each in a profiler region for "
                 "`ncu --profile-from-start off` (no benchmark, no JSON)");
  app.add_option("--gpu-memory-utilization", gpu_memory_utilization, "Share of the GPU the engine may use")
      ->capture_default_str();
  app.add_option("--json", json_path, "Where to write the JSON results")->capture_default_str();
  std::string kv_cache_dtype = "auto";
  app.add_option("--kv-cache-dtype", kv_cache_dtype,
                 "KV-cache element type of every run (auto: the bf16 weights' dtype; float32, float16, fp8); the CPU "
                 "side of --parity keeps it unless it is fp8 (then f32)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::string kv_error;
  const auto kv_choice = parse_kv_cache_dtype(kv_cache_dtype, kv_error);
  if (!kv_choice) {
    std::fprintf(stderr, "%s\n", kv_error.c_str());
    return 2;
  }
  const dtype kv_type = resolve_kv_cache_dtype(*kv_choice, dtype::bf16);
  std::vector<throughput_case> cases;
  for (const std::string& s : case_specs) {
    long long b = 0, in = 0, out = 0;
    char x1 = 0, x2 = 0, extra = 0;
    if (std::sscanf(s.c_str(), "%lld%c%lld%c%lld%c", &b, &x1, &in, &x2, &out, &extra) != 5 || x1 != 'x' || x2 != 'x' ||
        b < 1 || in < 1 || out < 1) {
      std::fprintf(stderr, "--cases: '%s' is not BATCHxINxOUT with positive counts (e.g. 64x128x128)\n", s.c_str());
      return 2;
    }
    cases.push_back({b, in, out});
  }
  for (int64_t b : profile_batches)
    if (b < 1) {
      std::fprintf(stderr, "--profile: batch sizes must be positive, got %ld\n", static_cast<long>(b));
      return 2;
    }

  if (visible_gpu_count() == 0) {
    std::printf("skipped: no GPU (%s)\n", gpu_unavailable_reason().c_str());
    return 77;
  }
  double bandwidth = 0.0;
#ifdef ACTORLLM_HAVE_CUDA
  std::fprintf(stderr, "measuring copy bandwidth...\n");
  bandwidth = cuda::measure_copy_bandwidth(0, size_t{2} << 30, 10);
#endif

  json_writer w;
  w.begin_object();
  w.key("benchmark").value("gpu");
  w.key("config").value(config_dir);
  std::vector<std::pair<std::string, std::string>> table;
  table.emplace_back("copy bandwidth, read + write (GB/s)", fmt::format("{:.1f}", bandwidth / 1e9));
  w.key("copy_bandwidth_bytes_per_s").value(bandwidth);

  if ((gemv || gemv_only) && profile_batches.empty()) {
    // The 8B's Linear shapes: q/o (4096 -> 4096), gate/up (4096 -> 14336), down (14336 -> 4096).
    std::vector<gemv_case> rows;
    {
      std::unique_ptr<backend> be = make_backend(device{device_kind::cuda, 0}, 1);
      for (const std::string format : {"int4 g128", "int8 g128", "int8 per-channel", "bf16"})
        for (const auto& [n_in, n_out] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 14336}, {14336, 4096}}) {
          std::fprintf(stderr, "gemv %s %ld -> %ld...\n", format.c_str(), static_cast<long>(n_in),
                       static_cast<long>(n_out));
          for (const gemv_case& c : measure_gemv(*be, format, n_in, n_out, {1, 8}))
            rows.push_back(c);
        }
      // The 8B's gate and up (with their SiLU) and its q/k/v (4096 -> 4096, 1024, 1024: the same bytes as three of
      // 4096 -> 2048) in one launch each.
      for (const auto& [format, n_out] :
           {std::pair<std::string, int64_t>{"bf16 gate+up", 14336}, {"bf16 q/k/v", 2048}}) {
        std::fprintf(stderr, "gemv %s 4096 -> %ld...\n", format.c_str(), static_cast<long>(n_out));
        for (const gemv_case& c : measure_gemv(*be, format, 4096, n_out, {1, 8}))
          rows.push_back(c);
      }
    }
#ifdef ACTORLLM_HAVE_CUDA
    if (gemv_sweep) {
      // Each setting over the same shapes: "cublas" is the GEMV's row limit at 0 (every matmul to cuBLAS).
      std::unique_ptr<backend> be = make_backend(device{device_kind::cuda, 0}, 1);
      const cuda::gemv::tuning saved = cuda::gemv_tuning();
      w.key("gemv_sweep").begin_array();
      for (const auto& [n_in, n_out] :
           {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 6144}, {4096, 28672}, {14336, 4096}})
        for (const int loads : {0, 4, 8, 16, 32}) {
          cuda::gemv_tuning() = loads == 0 ? cuda::gemv::tuning{saved.loads_in_flight, 0, saved.max_elements}
                                           : cuda::gemv::tuning{loads, cuda::gemv::max_rows, -1};
          const std::string setting = loads == 0 ? "cublas" : fmt::format("loads {}", loads);
          std::fprintf(stderr, "gemv sweep %ld -> %ld, %s...\n", static_cast<long>(n_in), static_cast<long>(n_out),
                       setting.c_str());
          for (const gemv_case& c : measure_gemv(*be, "bf16", n_in, n_out, {1, 2, 4, 8})) {
            const double of_copy = bandwidth > 0 ? c.bytes_per_s / bandwidth : 0.0;
            table.emplace_back(fmt::format("sweep {}->{} x{} {} (us, of copy)", n_in, n_out, c.tokens, setting),
                               fmt::format("{:.1f} {:.0f}%", c.seconds_per_call * 1e6, 100.0 * of_copy));
            w.begin_object();
            w.key("setting").value(setting);
            w.key("n_in").value(n_in);
            w.key("n_out").value(n_out);
            w.key("tokens").value(c.tokens);
            w.key("microseconds_per_call").value(c.seconds_per_call * 1e6);
            w.key("fraction_of_copy_bandwidth").value(of_copy);
            w.end_object();
          }
        }
      w.end_array();
      cuda::gemv_tuning() = saved;
    }
#endif
    {
      std::unique_ptr<backend> be = make_backend(device{device_kind::cuda, 0}, 1);
      for (const int64_t batch : {int64_t{1}, int64_t{64}}) {
        const double us = measure_add_rms_norm(*be, batch, 4096);
        table.emplace_back(fmt::format("add_rms_norm 4096 x{}, bf16 out (us per call)", batch),
                           fmt::format("{:.2f}", us));
        w.key(fmt::format("add_rms_norm_4096_x{}_us", batch)).value(us);
      }
    }
    w.key("gemv").begin_array();
    for (const gemv_case& c : rows) {
      const double of_copy = bandwidth > 0 ? c.bytes_per_s / bandwidth : 0.0;
      table.emplace_back(fmt::format("GEMV {} {}->{} x{} (GB/s, of copy)", c.format, c.n_in, c.n_out, c.tokens),
                         fmt::format("{:.0f} {:.0f}%", c.bytes_per_s / 1e9, 100.0 * of_copy));
      w.begin_object();
      w.key("format").value(c.format);
      w.key("n_in").value(c.n_in);
      w.key("n_out").value(c.n_out);
      w.key("tokens").value(c.tokens);
      w.key("weight_bytes").value(static_cast<uint64_t>(c.weight_bytes));
      w.key("microseconds_per_call").value(c.seconds_per_call * 1e6);
      w.key("weight_bytes_per_s").value(c.bytes_per_s);
      w.key("fraction_of_copy_bandwidth").value(of_copy);
      w.end_object();
    }
    w.end_array();
  }
  if (gemv_only) {
    w.end_object();
    std::printf("%-52s %16s\n", "metric", "value");
    for (const auto& [k, v] : table)
      std::printf("%-52s %16s\n", k.c_str(), v.c_str());
    return bench::write_json_result(json_path, w.str());
  }

  std::fprintf(stderr, "making dummy bf16 weights...\n");
  auto t_load = clock_type::now();
  model::loaded_shard loaded = load_dummy(config_dir, dtype::bf16);
  const double load_secs = seconds_since(t_load);
  const model::model_config cfg = loaded.config;
  size_t bytes_per_token = loaded.weights.total_bytes();
  if (!cfg.tie_word_embeddings)
    if (const auto* e = loaded.weights.find("model.embed_tokens.weight"))
      bytes_per_token -= e->nbytes();
  w.key("weight_bytes_per_token").value(static_cast<uint64_t>(bytes_per_token));
  table.emplace_back("weight bytes read per decode token (GB)", fmt::format("{:.2f}", bytes_per_token / 1e9));
  table.emplace_back("dummy weights made on the host (s)", fmt::format("{:.1f}", load_secs));

  if (!profile_batches.empty()) {
    std::unique_ptr<backend> be = make_backend(device{device_kind::cuda, 0}, 1);
    single_rank_collective comm;
    model::llama_model llm{cfg, std::move(loaded.weights), model::shard_spec{}, comm, *be};
    llm.set_kv_cache_dtype(kv_type);
    for (int64_t b : profile_batches)
      profile_decode_step(llm, b);
    return 0;
  }

  std::vector<int32_t> parity_tokens;
  {
    std::unique_ptr<backend> be = make_backend(device{device_kind::cuda, 0}, 1);
    single_rank_collective comm;
    auto t_up = clock_type::now();
    model::llama_model llm{cfg, std::move(loaded.weights), model::shard_spec{}, comm, *be};
    llm.set_kv_cache_dtype(kv_type);
    table.emplace_back("KV cache dtype", std::string{kv_cache_dtype_name(kv_type)});
    be->synchronize();
    table.emplace_back("weights uploaded (s)", fmt::format("{:.1f}", seconds_since(t_up)));
    std::fprintf(stderr, "decode batch 1...\n");
    const double tps1 = decode_batch1(llm, 16, steps, false);
    std::fprintf(stderr, "decode batch 1 with CUDA graphs...\n");
    const double tps1_graphs = decode_batch1(llm, 16, steps, true);
    const double roofline = bandwidth / static_cast<double>(bytes_per_token);
    table.emplace_back("decode batch 1 (tokens/s)", fmt::format("{:.1f}", tps1));
    table.emplace_back("decode batch 1 (ms/token)", fmt::format("{:.2f}", 1e3 / tps1));
    table.emplace_back("batch-1 roofline (tokens/s)", fmt::format("{:.1f}", roofline));
    table.emplace_back("batch-1 decode / roofline", fmt::format("{:.1f}%", 100.0 * tps1 / roofline));
    w.key("decode_batch1_tokens_per_s").value(tps1);
    w.key("roofline_batch1_tokens_per_s").value(roofline);
    w.key("batch1_fraction_of_roofline").value(tps1 / roofline);
    // The bar for graphs: batch-1 decode at >= 85% of the measured roofline.
    table.emplace_back("decode batch 1, CUDA graphs (tokens/s)", fmt::format("{:.1f}", tps1_graphs));
    table.emplace_back("batch-1 decode with graphs / roofline", fmt::format("{:.1f}%", 100.0 * tps1_graphs / roofline));
    table.emplace_back("graphs / eager (batch 1)", fmt::format("{:.3f}", tps1_graphs / tps1));
    w.key("decode_batch1_graphs_tokens_per_s").value(tps1_graphs);
    w.key("batch1_graphs_fraction_of_roofline").value(tps1_graphs / roofline);
    // The same replays with the token sampled on the device as serving does (a default request): the step without
    // the host's argmax over the downloaded row, with the sampler's kernel and its small download instead. A failure
    // here is reported, not fatal: the figures above stand.
    try {
      std::fprintf(stderr, "decode batch 1 with CUDA graphs, sampled on the device...\n");
      const double tps1_sampled = decode_batch1(llm, 16, steps, true, pick_token::device_sampler);
      table.emplace_back("decode batch 1, graphs, device sampler (tokens/s)", fmt::format("{:.1f}", tps1_sampled));
      table.emplace_back("  its ms/token", fmt::format("{:.2f}", 1e3 / tps1_sampled));
      w.key("decode_batch1_graphs_device_sampler_tokens_per_s").value(tps1_sampled);
    } catch (const std::exception& e) {
      table.emplace_back("decode batch 1, graphs, device sampler (tokens/s)", "failed");
      std::fprintf(stderr, "decode batch 1, device sampler: %s\n", e.what());
    }

    if (parity) {
      std::fprintf(stderr, "parity: GPU forward...\n");
      const int64_t prompt_len = 16, decode = 4;
      parity_tokens = prompt_of(3, prompt_len, cfg.n_vocab);
      // Greedy continuation chosen by the GPU, then fed to the CPU's forward.
      const bench::logit_rows gpu_rows = bench::greedy_rows(llm, parity_tokens, decode);
      std::fprintf(stderr, "parity: CPU forward (same dummy weights)...\n");
      model::loaded_shard host = load_dummy(config_dir, dtype::bf16);
      std::unique_ptr<backend> cpu = make_backend(device_kind::cpu, thread_pool::global().size());
      single_rank_collective cpu_comm;
      model::llama_model ref{cfg, std::move(host.weights), model::shard_spec{}, cpu_comm, *cpu};
      ref.set_kv_cache_dtype(kv_type == dtype::fp8_e4m3 ? dtype::f32 : kv_type);
      const bench::rows_difference p = bench::compare_rows(gpu_rows, bench::rows_of(ref, parity_tokens, prompt_len));
      table.emplace_back("8B parity: top-1 agreement (rows)", fmt::format("{}/{}", p.top1_agree, p.rows));
      table.emplace_back("8B parity: worst relative L2 error", fmt::format("{:.2e}", p.max_rel_l2_error));
      table.emplace_back("8B parity: max abs logit error", fmt::format("{:.3e}", p.max_abs_error));
      bench::write_difference(w, p, "parity_");
    }
  }

  if (throughput && !cases.empty()) {
    int64_t max_batch = 1, max_len = 0;
    for (const throughput_case& c : cases) {
      max_batch = std::max(max_batch, c.batch);
      max_len = std::max(max_len, c.input_len + c.output_len);
    }
    std::fprintf(stderr, "engine: loading (dummy bf16 weights, cuda)...\n");
    engine_config ec;
    ec.model = config_dir;
    ec.load_format = "dummy";
    ec.dtype = "bfloat16";
    ec.kv_cache_dtype = kv_cache_dtype;
    ec.device = "cuda";
    ec.max_num_seqs = static_cast<int32_t>(max_batch);
    ec.max_num_batched_tokens = 8192;
    ec.max_model_len = static_cast<int32_t>(std::max<int64_t>(max_len, 4096));
    ec.gpu_memory_utilization = gpu_memory_utilization;
    LLM engine{ec};
    for (throughput_case& c : cases) {
      std::fprintf(stderr, "engine: batch %ld, %ld in / %ld out...\n", static_cast<long>(c.batch),
                   static_cast<long>(c.input_len), static_cast<long>(c.output_len));
      std::vector<prompt> prompts;
      for (int64_t s = 0; s < c.batch; ++s)
        prompts.push_back(prompt{prompt_of(s + 11, c.input_len, cfg.n_vocab)});
      sampling_params sp;
      sp.temperature = 0;
      sp.max_tokens = static_cast<int32_t>(c.output_len);
      sp.ignore_eos = true;
      auto t0 = clock_type::now();
      auto outs = engine.generate(prompts, sp);
      c.seconds = seconds_since(t0);
      int64_t produced = 0;
      for (const auto& o : outs)
        produced += static_cast<int64_t>(o.outputs.front().token_ids.size());
      c.output_tokens_per_s = static_cast<double>(produced) / c.seconds;
      table.emplace_back(fmt::format("engine output tokens/s, batch {}, {}/{}", c.batch, c.input_len, c.output_len),
                         fmt::format("{:.0f}", c.output_tokens_per_s));
    }
    w.key("throughput").begin_array();
    for (const throughput_case& c : cases) {
      w.begin_object();
      w.key("batch").value(c.batch);
      w.key("input_len").value(c.input_len);
      w.key("output_len").value(c.output_len);
      w.key("seconds").value(c.seconds);
      w.key("output_tokens_per_s").value(c.output_tokens_per_s);
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();

  std::printf("%-52s %16s\n", "metric", "value");
  for (const auto& [k, v] : table)
    std::printf("%-52s %16s\n", k.c_str(), v.c_str());
  return bench::write_json_result(json_path, w.str());
}
