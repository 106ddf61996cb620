// Quantized Linear weights on the CPU against bf16: the GEMV of one decode step (1 and 8 tokens) at the shapes of
// TinyLlama 1.1B (q/o 2048 -> 2048, k/v 2048 -> 256, gate+up 2048 -> 5632 through the SwiGLU kernel, down 5632 ->
// 2048) for bf16 packed panels (vdpbf16ps), int8 per-channel and int4 g128 weight-only, and W8A8; then all of one
// layer's matmuls, and from them the matmuls of a whole decode step (22 layers and the bf16 lm_head). Prints tables of
// weight GB/s and the speed ratio to bf16; writes JSON (--json PATH).
//
// Each variant holds enough copies of every matrix (one "layer" per copy) to be far larger than the last-level cache,
// and a measurement sweeps through all copies, so the figures are memory-bound ones. This machine's bandwidth drifts
// (a VM on shared hosts), so the variants are timed in alternation, round after round, and each figure is the median
// over rounds.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

// simd.hpp first: it includes <immintrin.h> with GCC 12's false -Wuninitialized silenced.
#include "kernels/cpu/simd.hpp"

#include "bench/bench_json.hpp"
#include "bench/bench_support.hpp"
#include "bench/memory_bandwidth.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "kernels/cpu/matmul_quantized.hpp"
#include "kernels/quantized_linear.hpp"
#include "util/json_writer.hpp"
#include "util/thread_pool.hpp"

namespace {

using namespace actorllm;
using clock_type = std::chrono::steady_clock;

enum class variant { bf16, int8, int4, w8a8 };
const std::vector<variant> all_variants = {variant::bf16, variant::int8, variant::int4, variant::w8a8};

const char* variant_name(variant v) {
  switch (v) {
    case variant::bf16:
      return "bf16 packed";
    case variant::int8:
      return "int8 per-channel";
    case variant::int4:
      return "int4 g128";
    case variant::w8a8:
      return "W8A8";
  }
  return "?";
}

// One Linear weight in a variant's form.
struct weight {
  int64_t n_out = 0, n_in = 0;
  std::shared_ptr<host_buffer> bf16;  // bf16 panels
  std::shared_ptr<cpu::quantized_panels> q;
  size_t bytes() const { return q ? q->size() : bf16->size(); }
};

// A quantized weight of random codes and scales (the values do not change the time).
quantized_linear random_quantized(int bits, int64_t n_out, int64_t n_in, int64_t group, activation_quant act,
                                  uint64_t seed) {
  quantized_linear q;
  q.bits = bits;
  q.n_out = n_out;
  q.n_in = n_in;
  q.group_size = group == 0 ? n_in : group;
  q.activations = act;
  q.codes.resize(static_cast<size_t>(n_out * n_in));
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& c : q.codes) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    c = static_cast<uint8_t>(s & ((1u << bits) - 1));
  }
  q.scales.assign(static_cast<size_t>(n_out * q.n_groups()), 0.01f);
  q.zeros.assign(q.scales.size(), act == activation_quant::int8_per_token ? uint8_t{128} : uint8_t(1 << (bits - 1)));
  return q;
}

weight make_weight(variant v, int64_t n_out, int64_t n_in, const quantized_linear* source, thread_pool& pool) {
  weight w;
  w.n_out = n_out;
  w.n_in = n_in;
  if (v == variant::bf16) {
    std::vector<uint16_t> rows(static_cast<size_t>(n_out * n_in));
    for (size_t i = 0; i < rows.size(); ++i)
      rows[i] = static_cast<uint16_t>(0x3c00 + (i * 7919) % 0x380);
    w.bf16 = host_buffer::allocate_huge(cpu::bf16_panels_bytes(n_out, n_in));
    cpu::pack_bf16_panels(rows.data(), n_out, n_in, static_cast<uint16_t*>(w.bf16->data()), pool);
  } else {
    w.q = cpu::pack_quantized(*source, pool);
  }
  return w;
}

// One layer's Linear weights.
struct layer {
  weight q, k, v, o, gate, up, down;
};

constexpr int64_t n_embd = 2048, n_kv = 256, n_ff = 5632, n_vocab = 32000, n_layer = 22;

// The matmul shapes of the table.
enum class shape_kind { qo, kv, gate_up, down };
const std::vector<shape_kind> all_shapes = {shape_kind::qo, shape_kind::kv, shape_kind::gate_up, shape_kind::down};

const char* shape_name(shape_kind s) {
  switch (s) {
    case shape_kind::qo:
      return "2048->2048";
    case shape_kind::kv:
      return "2048->256";
    case shape_kind::gate_up:
      return "2048->5632 gate+up";
    case shape_kind::down:
      return "5632->2048";
  }
  return "?";
}

struct scratch {
  std::vector<float> x, y, up, logits;
  explicit scratch(int64_t max_tokens)
      : x(static_cast<size_t>(max_tokens * n_ff)),
        y(static_cast<size_t>(max_tokens * n_ff)),
        up(static_cast<size_t>(max_tokens * n_ff)),
        logits(static_cast<size_t>(max_tokens * n_vocab)) {
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
  }
};

void run_linear(const weight& w, const float* x, int64_t n_tokens, float* y, thread_pool& pool) {
  if (w.q) {
    const cpu::quantized_target t{w.q.get(), nullptr, y};
    cpu::matmul_quantized(x, n_tokens, w.n_in, std::span{&t, 1}, pool);
  } else {
    const cpu::matmul_target t{w.bf16->data(), dtype::bf16, w.n_out, nullptr, y, true};
    cpu::matmul_group(x, n_tokens, w.n_in, std::span{&t, 1}, pool);
  }
}

void run_gate_up(const weight& g, const weight& u, const float* x, int64_t n_tokens, scratch& s, thread_pool& pool) {
  if (g.q)
    cpu::matmul_quantized_silu_gate(x, n_tokens, g.n_in, *g.q, *u.q, s.up.data(), s.y.data(), pool);
  else
    cpu::matmul_silu_gate(x, n_tokens, g.n_in, g.bf16->data(), u.bf16->data(), dtype::bf16, true, false, g.n_out,
                          s.up.data(), s.y.data(), pool);
}

// q, k and v as one group (the input rounded or quantized once).
void run_qkv(const layer& l, const float* x, int64_t n_tokens, scratch& s, thread_pool& pool) {
  float* y = s.y.data();
  if (l.q.q) {
    const std::array<cpu::quantized_target, 3> t{cpu::quantized_target{l.q.q.get(), nullptr, y},
                                                 cpu::quantized_target{l.k.q.get(), nullptr, y + n_tokens * n_embd},
                                                 cpu::quantized_target{l.v.q.get(), nullptr, s.up.data()}};
    cpu::matmul_quantized(x, n_tokens, n_embd, t, pool);
  } else {
    const std::array<cpu::matmul_target, 3> t{
        cpu::matmul_target{l.q.bf16->data(), dtype::bf16, n_embd, nullptr, y, true},
        cpu::matmul_target{l.k.bf16->data(), dtype::bf16, n_kv, nullptr, y + n_tokens * n_embd, true},
        cpu::matmul_target{l.v.bf16->data(), dtype::bf16, n_kv, nullptr, s.up.data(), true}};
    cpu::matmul_group(x, n_tokens, n_embd, t, pool);
  }
}

size_t shape_bytes(const layer& l, shape_kind s) {
  switch (s) {
    case shape_kind::qo:
      return l.q.bytes();
    case shape_kind::kv:
      return l.k.bytes();
    case shape_kind::gate_up:
      return l.gate.bytes() + l.up.bytes();
    case shape_kind::down:
      return l.down.bytes();
  }
  return 0;
}

// Seconds per call of shape s, sweeping once through every layer copy.
double sweep_shape(const std::vector<layer>& layers, shape_kind s, int64_t n_tokens, scratch& sc, thread_pool& pool) {
  const auto t0 = clock_type::now();
  for (const layer& l : layers) {
    switch (s) {
      case shape_kind::qo:
        run_linear(l.q, sc.x.data(), n_tokens, sc.y.data(), pool);
        break;
      case shape_kind::kv:
        run_linear(l.k, sc.x.data(), n_tokens, sc.y.data(), pool);
        break;
      case shape_kind::gate_up:
        run_gate_up(l.gate, l.up, sc.x.data(), n_tokens, sc, pool);
        break;
      case shape_kind::down:
        run_linear(l.down, sc.x.data(), n_tokens, sc.y.data(), pool);
        break;
    }
  }
  return std::chrono::duration<double>(clock_type::now() - t0).count() / static_cast<double>(layers.size());
}

// Seconds per layer of one whole decode step's matmuls (q/k/v group, o, gate+up, down), sweeping every copy.
double sweep_step(const std::vector<layer>& layers, int64_t n_tokens, scratch& sc, thread_pool& pool) {
  const auto t0 = clock_type::now();
  for (const layer& l : layers) {
    run_qkv(l, sc.x.data(), n_tokens, sc, pool);
    run_linear(l.o, sc.x.data(), n_tokens, sc.y.data(), pool);
    run_gate_up(l.gate, l.up, sc.x.data(), n_tokens, sc, pool);
    run_linear(l.down, sc.x.data(), n_tokens, sc.y.data(), pool);
  }
  return std::chrono::duration<double>(clock_type::now() - t0).count() / static_cast<double>(layers.size());
}

size_t layer_bytes(const layer& l) {
  return l.q.bytes() + l.k.bytes() + l.v.bytes() + l.o.bytes() + l.gate.bytes() + l.up.bytes() + l.down.bytes();
}

std::vector<layer> make_layers(variant v, size_t min_bytes, thread_pool& pool) {
  const int bits = v == variant::int4 ? 4 : 8;
  const int64_t group = v == variant::int4 ? 128 : 0;
  const activation_quant act = v == variant::w8a8 ? activation_quant::int8_per_token : activation_quant::none;
  // One quantized source per shape, packed again for every copy.
  std::map<std::pair<int64_t, int64_t>, quantized_linear> sources;
  if (v != variant::bf16)
    for (auto [o, i] :
         {std::pair{n_embd, n_embd}, std::pair{n_kv, n_embd}, std::pair{n_ff, n_embd}, std::pair{n_embd, n_ff}})
      sources.emplace(std::pair{o, i}, random_quantized(bits, o, i, group, act, static_cast<uint64_t>(o * 31 + i)));
  auto make = [&](int64_t o, int64_t i) {
    const auto it = sources.find({o, i});
    return make_weight(v, o, i, it == sources.end() ? nullptr : &it->second, pool);
  };
  std::vector<layer> layers;
  size_t total = 0;
  while (total < min_bytes || layers.size() < 2) {
    layer l{make(n_embd, n_embd), make(n_kv, n_embd), make(n_kv, n_embd), make(n_embd, n_embd),
            make(n_ff, n_embd),   make(n_ff, n_embd), make(n_embd, n_ff)};
    total += layer_bytes(l);
    layers.push_back(std::move(l));
  }
  return layers;
}

struct row {
  std::string shape;
  int64_t n_tokens;
  variant v;
  size_t bytes;
  double seconds;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Quantized Linear weights (int8, int4 g128, W8A8) against bf16 panels: decode GEMV GB/s and ratios"};
  std::string json_path = "bench/results/quantized_matmul.json";
  int threads = 0, rounds = 15;
  double set_gib = 1.0;
  bool quick = false;
  app.add_option("--json", json_path, "Where to write the JSON results")->capture_default_str();
  app.add_option("--threads", threads, "Pool size (default: ACTORLLM_NUM_THREADS or all hardware threads)");
  app.add_option("--rounds", rounds, "Alternating rounds per figure")->capture_default_str();
  app.add_option("--gib", set_gib, "Weights per variant, GiB (layer copies; past the last-level cache)")
      ->capture_default_str();
  app.add_flag("--quick", quick, "5 rounds, 0.5 GiB per variant");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    rounds = 5;
    set_gib = 0.5;
  }
  std::unique_ptr<thread_pool> own_pool;
  thread_pool* pool = &thread_pool::global();
  if (threads > 0) {
    own_pool = std::make_unique<thread_pool>(threads);
    pool = own_pool.get();
  }
  if (!cpu::have_quantized_avx512_kernels() || !cpu::have_bf16_dot_kernels())
    fmt::print("note: this build has no AVX-512 quantized or vdpbf16ps kernels; figures are of the fallbacks\n");

  fmt::print("actorllm quantized matmul: isa {}, {} threads, {} rounds\n", cpu::simd::isa_name, pool->size(), rounds);
  const double bw = bench::measure_read_bandwidth(*pool, size_t{1} << 30, quick ? 2 : 4) / 1e9;
  fmt::print("memory bandwidth (streaming read of 1 GiB, best pattern): {:.2f} GB/s\n", bw);

  const auto min_bytes = static_cast<size_t>(set_gib * static_cast<double>(size_t{1} << 30));
  std::map<variant, std::vector<layer>> layers;
  for (variant v : all_variants) {
    layers[v] = make_layers(v, min_bytes, *pool);
    fmt::print("{:<17} {:>3} layer copies, {:.2f} GB ({:.1f} MB per layer)\n", variant_name(v), layers[v].size(),
               static_cast<double>(layer_bytes(layers[v][0]) * layers[v].size()) / 1e9,
               static_cast<double>(layer_bytes(layers[v][0])) / 1e6);
  }
  scratch sc(8);

  // Shape rows: per (shape, tokens), every round times each variant once, the starting variant rotating.
  std::vector<row> rows;
  for (int64_t n_tokens : {int64_t{1}, int64_t{8}})
    for (shape_kind s : all_shapes) {
      std::map<variant, std::vector<double>> times;
      for (variant v : all_variants)
        sweep_shape(layers[v], s, n_tokens, sc, *pool);  // warm: thread-local buffers, page tables
      for (int r = 0; r < rounds; ++r)
        for (size_t j = 0; j < all_variants.size(); ++j) {
          const variant v = all_variants[(j + static_cast<size_t>(r)) % all_variants.size()];
          times[v].push_back(sweep_shape(layers[v], s, n_tokens, sc, *pool));
        }
      for (variant v : all_variants)
        rows.push_back({shape_name(s), n_tokens, v, shape_bytes(layers[v][0], s), bench::median(times[v])});
    }
  // Whole decode steps (all seven matmuls of a layer), batch 1 and 8, and the bf16 lm_head (2048 -> 32000, left
  // unquantized by AWQ/GPTQ checkpoints) timed in the same rounds, for the projection of a whole model.
  std::vector<weight> lm_heads;
  for (size_t bytes = 0; bytes < min_bytes || lm_heads.size() < 2; bytes += lm_heads.back().bytes())
    lm_heads.push_back(make_weight(variant::bf16, n_vocab, n_embd, nullptr, *pool));
  std::vector<row> steps;
  std::map<int64_t, double> lm_head_seconds;
  for (int64_t n_tokens : {int64_t{1}, int64_t{8}}) {
    std::map<variant, std::vector<double>> times;
    std::vector<double> head_times;
    auto sweep_heads = [&] {
      const auto t0 = clock_type::now();
      for (const weight& h : lm_heads)
        run_linear(h, sc.x.data(), n_tokens, sc.logits.data(), *pool);
      return std::chrono::duration<double>(clock_type::now() - t0).count() / static_cast<double>(lm_heads.size());
    };
    for (variant v : all_variants)
      sweep_step(layers[v], n_tokens, sc, *pool);
    sweep_heads();
    for (int r = 0; r < rounds; ++r) {
      for (size_t j = 0; j < all_variants.size(); ++j) {
        const variant v = all_variants[(j + static_cast<size_t>(r)) % all_variants.size()];
        times[v].push_back(sweep_step(layers[v], n_tokens, sc, *pool));
      }
      head_times.push_back(sweep_heads());
    }
    for (variant v : all_variants)
      steps.push_back({"layer matmuls", n_tokens, v, layer_bytes(layers[v][0]), bench::median(times[v])});
    lm_head_seconds[n_tokens] = bench::median(head_times);
  }

  auto bf16_seconds = [](const std::vector<row>& all, const row& r) {
    for (const row& b : all)
      if (b.v == variant::bf16 && b.shape == r.shape && b.n_tokens == r.n_tokens)
        return b.seconds;
    return r.seconds;
  };
  fmt::print("\n{:<20} {:>6}  {:<17} {:>9}  {:>10}  {:>9}  {:>6}  {:>12}\n", "shape", "tokens", "weights", "MB", "time",
             "GB/s", "of BW", "speed vs bf16");
  auto print = [&](const std::vector<row>& all) {
    for (const row& r : all) {
      const double gbs = static_cast<double>(r.bytes) / r.seconds / 1e9;
      fmt::print("{:<20} {:>6}  {:<17} {:>9.2f}  {:>7.1f} us  {:>9.2f}  {:>5.0f}%  {:>11.2f}x\n", r.shape, r.n_tokens,
                 variant_name(r.v), static_cast<double>(r.bytes) / 1e6, r.seconds * 1e6, gbs, 100.0 * gbs / bw,
                 bf16_seconds(all, r) / r.seconds);
    }
  };
  print(rows);
  fmt::print("\none layer's matmuls (q/k/v group, o, gate+up SwiGLU, down), per layer:\n");
  print(steps);
  // The matmuls of a whole TinyLlama decode step: 22 layers in the variant, the lm_head in bf16.
  struct projection {
    int64_t n_tokens;
    variant v;
    double seconds, speed;
  };
  std::vector<projection> model;
  fmt::print("\nTinyLlama 1.1B decode step, matmuls only (22 layers + the bf16 lm_head, {:.1f} / {:.1f} us):\n",
             lm_head_seconds[1] * 1e6, lm_head_seconds[8] * 1e6);
  for (const row& r : steps) {
    const double secs = static_cast<double>(n_layer) * r.seconds + lm_head_seconds[r.n_tokens];
    const double bf16_secs = static_cast<double>(n_layer) * bf16_seconds(steps, r) + lm_head_seconds[r.n_tokens];
    model.push_back({r.n_tokens, r.v, secs, bf16_secs / secs});
    fmt::print("{:>6} tokens  {:<17} {:>9.2f} ms  {:>8.1f} steps/s  {:>6.2f}x bf16\n", r.n_tokens, variant_name(r.v),
               secs * 1e3, 1.0 / secs, bf16_secs / secs);
  }

  json_writer j;
  j.begin_object();
  j.key("isa").value(cpu::simd::isa_name);
  j.key("threads").value(pool->size());
  j.key("rounds").value(rounds);
  j.key("memory_bandwidth_gbs").value(bw);
  auto emit = [&](const char* key, const std::vector<row>& all) {
    j.key(key).begin_array();
    for (const row& r : all) {
      const double gbs = static_cast<double>(r.bytes) / r.seconds / 1e9;
      j.begin_object();
      j.key("shape").value(r.shape);
      j.key("n_tokens").value(r.n_tokens);
      j.key("weights").value(variant_name(r.v));
      j.key("weight_bytes").value(static_cast<int64_t>(r.bytes));
      j.key("seconds").value(r.seconds);
      j.key("weight_gbs").value(gbs);
      j.key("fraction_of_bandwidth").value(gbs / bw);
      j.key("speed_vs_bf16").value(bf16_seconds(all, r) / r.seconds);
      j.end_object();
    }
    j.end_array();
  };
  emit("gemv", rows);
  emit("layer_step", steps);
  j.key("model_projection").begin_array();
  for (const projection& p : model) {
    j.begin_object();
    j.key("n_tokens").value(p.n_tokens);
    j.key("weights").value(variant_name(p.v));
    j.key("seconds").value(p.seconds);
    j.key("speed_vs_bf16").value(p.speed);
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return bench::write_json_result(json_path, j.str());
}
