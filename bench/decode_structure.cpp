// What batch-1 decode's call structure lets the CPU kernels read on this machine, apart from everything else a step
// does. A decode step reads every weight once, in each layer's four matmul calls (q/k/v, o, gate|up with SiLU, down)
// and the lm_head, and the rest of the layer (norms, rope, the cache write, attention) runs between those calls. On a
// machine where one core reads only part of what the machine can (each core's misses in flight bound it), every
// moment a pool thread is not streaming weights is bandwidth lost: at each call's end (one thread waits for the
// other's last grain) and while the caller does the work between calls.
//
// This bench makes those calls alone, on packed bf16 weights of the model's shapes (dummy values), through the same
// CPU kernels and pool as the engine (cpu::matmul_group, cpu::matmul_silu_gate, the weights kept alive so the takeover
// path with its read-ahead runs), and times three ways of reading the same bytes, alternated in every round beside the
// bandwidth probe (bench/memory_bandwidth.hpp):
//   one call     the step's bytes as one matmul over one weight: the kernel with no call boundary;
//   calls        the step's calls back to back: each call's split, its last grain, its return;
//   calls+gaps   the same with the caller busy for --gaps microseconds before each call of a layer, as the work between
//                the calls keeps it. The defaults are the engine's, measured in batch-1 decode of the TinyLlama-1.1B
//                shape on the 2-vCPU Zen 5 VM (2026-11-30): 11, 30, 9 and 8.5 us between the calls, less the 5 us or
//                so of each call's own set-up and return that the calls here pay themselves.
// Each is given as a fraction of the round's probe. bench_cpu_decode measures the real step: what it loses beyond
// "calls+gaps" is the engine's own, what "calls+gaps" loses against "one call" is the structure's.
#include "bench/bench_json.hpp"
#include "bench/bench_support.hpp"
#include "bench/memory_bandwidth.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/tensor.hpp"
#include "model/model_config.hpp"
#include "util/json_writer.hpp"
#include "util/thread_pool.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace actorllm;
using clock_type = std::chrono::steady_clock;

/// One packed bf16 weight [n_out, n_in] in tensor_layout::cpu_bf16_panels, huge-page backed, of dummy values.
struct packed_weight {
  int64_t n_out = 0, n_in = 0;
  std::shared_ptr<host_buffer> buf;

  packed_weight(int64_t out, int64_t in) : n_out(out), n_in(in) {
    const size_t bytes = cpu::bf16_panels_bytes(out, in);
    buf = host_buffer::allocate_huge(bytes);
    // bf16 0.0078125 and -0.0078125 alternating: finite, and what is read is all that matters here.
    auto* p = static_cast<uint16_t*>(buf->data());
    for (size_t i = 0; i < bytes / 2; ++i)
      p[i] = (i & 1) != 0 ? uint16_t{0x3c00} : uint16_t{0xbc00};
  }
  size_t bytes() const { return cpu::bf16_panels_bytes(n_out, n_in); }
  cpu::matmul_target target(float* y) const {
    return cpu::matmul_target{buf->data(), dtype::bf16, n_out, nullptr, y, true, buf};
  }
};

struct layer_weights {
  packed_weight q, k, v, o, gate, up, down;
};

/// The calls of one decode step, on their own weights and buffers.
class decode_calls {
 public:
  explicit decode_calls(const model::model_config& c)
      : cfg_(c),
        x_(static_cast<size_t>(c.n_embd), 0.5f),
        q_(static_cast<size_t>(c.n_head * c.head_dim)),
        k_(static_cast<size_t>(c.n_head_kv * c.head_dim)),
        v_(k_.size()),
        attn_(q_.size(), 0.5f),
        proj_(x_.size()),
        up_(static_cast<size_t>(c.n_ff)),
        act_(up_.size()),
        logits_(static_cast<size_t>(c.n_vocab)),
        lm_head_(c.n_vocab, c.n_embd) {
    const int64_t e = c.n_embd, qd = c.n_head * c.head_dim, kvd = c.n_head_kv * c.head_dim;
    for (int64_t l = 0; l < c.n_layer; ++l)
      layers_.push_back(std::make_unique<layer_weights>(
          layer_weights{packed_weight{qd, e}, packed_weight{kvd, e}, packed_weight{kvd, e}, packed_weight{e, qd},
                        packed_weight{c.n_ff, e}, packed_weight{c.n_ff, e}, packed_weight{e, c.n_ff}}));
    bytes_ = lm_head_.bytes();
    for (const auto& w : layers_)
      bytes_ +=
          w->q.bytes() + w->k.bytes() + w->v.bytes() + w->o.bytes() + w->gate.bytes() + w->up.bytes() + w->down.bytes();
  }

  size_t bytes() const { return bytes_; }

  /// One step's calls; before call i of a layer (q/k/v, o, gate|up, down) the caller is busy for gaps[i] µs.
  void step(thread_pool& pool, const std::array<double, 4>& gaps) {
    const int64_t e = cfg_.n_embd;
    for (const auto& w : layers_) {
      busy_for(gaps[0]);
      const std::array<cpu::matmul_target, 3> qkv{w->q.target(q_.data()), w->k.target(k_.data()),
                                                  w->v.target(v_.data())};
      cpu::matmul_group(x_.data(), 1, e, qkv, pool);
      busy_for(gaps[1]);
      const cpu::matmul_target o = w->o.target(proj_.data());
      cpu::matmul_group(attn_.data(), 1, w->o.n_in, std::span{&o, 1}, pool);
      busy_for(gaps[2]);
      cpu::matmul_silu_gate(x_.data(), 1, e, w->gate.buf->data(), w->up.buf->data(), dtype::bf16, true, cfg_.n_ff,
                            up_.data(), act_.data(), pool, cpu::matmul_path::automatic, w->gate.buf, w->up.buf);
      busy_for(gaps[3]);
      const cpu::matmul_target down = w->down.target(proj_.data());
      cpu::matmul_group(act_.data(), 1, cfg_.n_ff, std::span{&down, 1}, pool);
    }
    const cpu::matmul_target head = lm_head_.target(logits_.data());
    cpu::matmul_group(x_.data(), 1, e, std::span{&head, 1}, pool);
  }

 private:
  static void busy_for(double us) {
    if (us <= 0)
      return;
    const auto until = clock_type::now() + std::chrono::duration<double, std::micro>(us);
    while (clock_type::now() < until) {
    }
  }

  model::model_config cfg_;
  std::vector<float> x_, q_, k_, v_, attn_, proj_, up_, act_, logits_;
  std::vector<std::unique_ptr<layer_weights>> layers_;
  packed_weight lm_head_;
  size_t bytes_ = 0;
};

/// The step's bytes as one weight of n_in inputs (rows rounded up to whole panels): one call, no boundary.
class one_call {
 public:
  one_call(size_t bytes, int64_t n_in)
      : w_(static_cast<int64_t>((bytes / static_cast<size_t>(2 * n_in) + 31) / 32 * 32), n_in),
        x_(static_cast<size_t>(n_in), 0.5f),
        y_(static_cast<size_t>(w_.n_out)) {}
  size_t bytes() const { return w_.bytes(); }
  void step(thread_pool& pool) {
    const cpu::matmul_target t = w_.target(y_.data());
    cpu::matmul_group(x_.data(), 1, w_.n_in, std::span{&t, 1}, pool);
  }

 private:
  packed_weight w_;
  std::vector<float> x_, y_;
};

template <class F>
double seconds_of(int steps, F&& step) {
  step();  // untimed warm-up (the read-ahead's record of which call follows which)
  const auto t0 = clock_type::now();
  for (int s = 0; s < steps; ++s)
    step();
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::array<double, 4> parse_gaps(const std::string& text) {
  std::array<double, 4> gaps{};
  std::stringstream in{text};
  std::string item;
  size_t n = 0;
  while (std::getline(in, item, ',')) {
    if (n == gaps.size())
      throw CLI::ValidationError("--gaps", fmt::format("four values expected, got more: '{}'", text));
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !(v >= 0 && v <= 10000))
      throw CLI::ValidationError("--gaps", fmt::format("'{}' is not a number of microseconds in [0, 10000]", item));
    gaps[n++] = v;
  }
  if (n != gaps.size())
    throw CLI::ValidationError("--gaps", fmt::format("four values expected (q/k/v, o, gate|up, down), got {}", n));
  return gaps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"batch-1 decode's matmul calls alone: one call, the calls, the calls with the work between them"};
  std::string config_dir = std::string{ACTORLLM_SOURCE_DIR} + "/bench/configs/tinyllama-1.1b";
  int threads = 2, rounds = 5, steps = 16, cycles = 3;
  std::string gaps_text = "6,25,4,3.5", json_path;
  app.add_option("--model", config_dir, "Model directory whose config.json gives the shapes")->capture_default_str();
  app.add_option("--threads", threads, "Pool threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--rounds", rounds, "Alternated rounds (medians reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--steps", steps, "Timed steps of each way in each cycle")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--cycles", cycles, "Cycles through the three ways per round (each way's median kept)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--gaps", gaps_text,
                 "Microseconds the caller is busy before a layer's q/k/v, o, gate|up and down calls (four, comma "
                 "separated)")
      ->capture_default_str();
  app.add_option("--json", json_path, "Write the results as JSON to this file");
  std::array<double, 4> gaps{};
  try {
    app.parse(argc, argv);
    gaps = parse_gaps(gaps_text);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  model::model_config cfg;
  try {
    cfg = model::load_model_config(config_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "--model: %s\n", e.what());
    return 2;
  }
  thread_pool pool(threads);
  std::fprintf(stderr, "packing dummy weights of %s...\n", config_dir.c_str());
  decode_calls calls{cfg};
  one_call single{calls.bytes(), cfg.n_embd};
  const std::array<double, 4> no_gaps{};

  std::vector<double> bandwidths, one, plain, gapped;
  for (int r = 0; r < rounds; ++r) {
    std::fprintf(stderr, "round %d/%d\n", r + 1, rounds);
    const double bw = bench::measure_read_bandwidth(pool);
    // The three ways in turn, `cycles` times, so that the machine's drift within the round hits each alike.
    std::vector<double> o, p, g;
    for (int c = 0; c < cycles; ++c) {
      o.push_back(static_cast<double>(single.bytes()) * steps / seconds_of(steps, [&] { single.step(pool); }) / bw);
      p.push_back(static_cast<double>(calls.bytes()) * steps / seconds_of(steps, [&] { calls.step(pool, no_gaps); }) /
                  bw);
      g.push_back(static_cast<double>(calls.bytes()) * steps / seconds_of(steps, [&] { calls.step(pool, gaps); }) / bw);
    }
    bandwidths.push_back(bw);
    one.push_back(bench::median(o));
    plain.push_back(bench::median(p));
    gapped.push_back(bench::median(g));
  }

  std::printf("%-44s %15s\n", "metric", "value");
  std::printf("%-44s %15s\n", "model", config_dir.substr(config_dir.find_last_of('/') + 1).c_str());
  std::printf("%-44s %15d\n", "threads", threads);
  std::printf("%-44s %15d\n", "rounds (medians below)", rounds);
  std::printf("%-44s %15d\n", "cycles of the three ways per round", cycles);
  std::printf("%-44s %15d\n", "timed steps of each way per cycle", steps);
  std::printf("%-44s %15.2f\n", "weight bytes per step (GB)", static_cast<double>(calls.bytes()) / 1e9);
  std::printf("%-44s %15s\n", "gaps before q/k/v, o, gate|up, down (us)", gaps_text.c_str());
  std::printf("%-44s %15.2f\n", "memory read bandwidth (GB/s)", bench::median(bandwidths) / 1e9);
  std::printf("%-44s %14.1f%%\n", "one call / probe", 100.0 * bench::median(one));
  std::printf("%-44s %14.1f%%\n", "calls / probe", 100.0 * bench::median(plain));
  std::printf("%-44s %14.1f%%\n", "calls+gaps / probe", 100.0 * bench::median(gapped));
  std::printf("per round: probe GB/s, one call, calls, calls+gaps\n");
  for (size_t r = 0; r < bandwidths.size(); ++r)
    std::printf("  round %zu: %7.2f GB/s %7.1f%% %7.1f%% %7.1f%%\n", r + 1, bandwidths[r] / 1e9, 100.0 * one[r],
                100.0 * plain[r], 100.0 * gapped[r]);

  if (json_path.empty())
    return 0;
  json_writer w;
  w.begin_object();
  w.key("benchmark").value("decode_structure");
  w.key("model").value(config_dir);
  w.key("threads").value(threads);
  w.key("rounds").value(rounds);
  w.key("cycles").value(cycles);
  w.key("steps").value(steps);
  w.key("weight_bytes_per_step").value(static_cast<uint64_t>(calls.bytes()));
  w.key("gaps_us").begin_array();
  for (double g : gaps)
    w.value(g);
  w.end_array();
  w.key("memory_bandwidth_bytes_per_s").value(bench::median(bandwidths));
  w.key("one_call_of_probe").value(bench::median(one));
  w.key("calls_of_probe").value(bench::median(plain));
  w.key("calls_with_gaps_of_probe").value(bench::median(gapped));
  w.key("per_round").begin_array();
  for (size_t r = 0; r < bandwidths.size(); ++r) {
    w.begin_object();
    w.key("memory_bandwidth_bytes_per_s").value(bandwidths[r]);
    w.key("one_call_of_probe").value(one[r]);
    w.key("calls_of_probe").value(plain[r]);
    w.key("calls_with_gaps_of_probe").value(gapped[r]);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return bench::write_json_result(json_path, w.str());
}
