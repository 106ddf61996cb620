// The floor under any backend parity figure for a bf16 model: the CPU against itself, summing in another order.
// Both runs round every activation to bf16 before each matmul, as the CUDA backend does; one runs the vdpbf16ps
// kernels, the other the FMA kernels (the same products, accumulated in another order), so a tiny difference in a
// sum moves a value across a bf16 rounding boundary now and then, and the layers carry it on. The relative L2 of
// the logits between the two runs is what a correct GPU backend can be expected to show against the CPU at that
// shape. Loads the model's dummy weights twice (one run each, one at a time, to keep the memory to one model) and
// takes a 16-token prompt with 4 greedy decode steps. With --layers, only the first N layers (how the difference
// grows with depth). Prints a table, writes JSON.
#include "bench/bench_json.hpp"
#include "bench/parity/logit_rows.hpp"
#include "comm/collective.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "util/thread_pool.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace actorllm;
namespace fs = std::filesystem;

// A copy of config_dir's config.json with num_hidden_layers set to `layers`, in a temporary directory.
fs::path config_with_layers(const std::string& config_dir, int layers) {
  std::ifstream in(fs::path(config_dir) / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  const std::regex key(R"("num_hidden_layers"\s*:\s*[0-9]+)");
  const std::string edited = std::regex_replace(text.str(), key, fmt::format("\"num_hidden_layers\": {}", layers));
  if (edited == text.str())
    throw std::runtime_error(fmt::format("{}/config.json has no num_hidden_layers to set", config_dir));
  const fs::path dir = fs::temp_directory_path() / fmt::format("actorllm-parity-floor-{}", ::getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << edited;
  return dir;
}

bench::logit_rows run_cpu(const std::string& config_dir, cpu::bf16_kernels kernels, std::vector<int32_t>& tokens,
                          int64_t prompt_len, int64_t decode, bool choose) {
  cpu::set_bf16_kernels(kernels);  // before the weights are imported: packed panels only for `best`
  model::loaded_shard loaded = bench::load_dummy(config_dir, dtype::bf16);
  const model::model_config cfg = loaded.config;
  std::unique_ptr<backend> be = make_backend(device_kind::cpu, thread_pool::global().size());
  single_rank_collective comm;
  model::llama_model llm{cfg, std::move(loaded.weights), model::shard_spec{}, comm, *be};
  if (choose) {
    tokens = bench::prompt_of(3, prompt_len, cfg.n_vocab);
    return bench::greedy_rows(llm, tokens, decode);
  }
  return bench::rows_of(llm, tokens, prompt_len);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The CPU against itself in another summation order, on a bf16 model with dummy weights"};
  std::string config_dir = std::string{ACTORLLM_SOURCE_DIR} + "/bench/configs/llama-3.1-8b";
  std::string json_path = "bench/results/parity_floor.json";
  int layers = 0;
  int64_t prompt_len = 16, decode = 4;
  app.add_option("--config", config_dir, "Directory with the model's config.json")->capture_default_str();
  app.add_option("--layers", layers, "Run only the first N layers (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--decode-steps", decode, "Greedy decode steps after the prompt")->check(CLI::Range(0, 64));
  app.add_option("--json", json_path, "Where to write the JSON results")->capture_default_str();
  bool control = false;
  app.add_flag("--control", control,
               "Run the vdpbf16ps kernels twice instead (the control: two loads of the same path must agree exactly)");
  CLI11_PARSE(app, argc, argv);

  if (!cpu::have_bf16_dot_kernels()) {
    std::printf("skipped: this build or CPU has no AVX512-BF16 kernels, so there is no second summation order\n");
    return 77;
  }
  fs::path temp;
  std::string dir = config_dir;
  if (layers > 0) {
    temp = config_with_layers(config_dir, layers);
    dir = temp.string();
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> tokens;
  std::fprintf(stderr, "vdpbf16ps kernels...\n");
  const bench::logit_rows a = run_cpu(dir, cpu::bf16_kernels::best, tokens, prompt_len, decode, true);
  std::fprintf(stderr, "FMA kernels...\n");
  const bench::logit_rows b =
      run_cpu(dir, control ? cpu::bf16_kernels::best : cpu::bf16_kernels::fma, tokens, prompt_len, decode, false);
  cpu::set_bf16_kernels(cpu::bf16_kernels::best);
  const bench::rows_difference d = bench::compare_rows(b, a);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!temp.empty())
    fs::remove_all(temp);

  json_writer w;
  w.begin_object();
  w.key("benchmark").value("parity_floor");
  w.key("config").value(config_dir);
  w.key("layers").value(static_cast<int64_t>(layers));
  bench::write_difference(w, d, "");
  w.key("seconds").value(secs);
  w.end_object();

  std::printf("%-52s %16s\n", "metric", "value");
  std::printf("%-52s %16s\n", "config", fs::path(config_dir).filename().c_str());
  std::printf("%-52s %16s\n", "layers", layers > 0 ? std::to_string(layers).c_str() : "all");
  for (size_t r = 0; r < d.rel_l2.size(); ++r)
    std::printf("%-52s %16.2e\n", fmt::format("relative L2, row {} ({})", r, r == 0 ? "prefill" : "decode").c_str(),
                d.rel_l2[r]);
  std::printf("%-52s %16.2e\n", "worst relative L2 (vdpbf16ps vs FMA order)", d.max_rel_l2_error);
  std::printf("%-52s %16.3e\n", "max abs logit difference", d.max_abs_error);
  std::printf("%-52s %16s\n", "top-1 agreement", fmt::format("{}/{}", d.top1_agree, d.rows).c_str());
  std::printf("%-52s %16.1f\n", "seconds", secs);
  return bench::write_json_result(json_path, w.str());
}
