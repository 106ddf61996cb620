// The memory-bandwidth probe as a companion process, for reading the machine's state beside another program's run
// (bench/compare_llama_cpp.sh around llama-bench): it probes once (bench/memory_bandwidth.hpp: the best of its read
// patterns), then reads one pass of that pattern over its buffer for each line it gets on stdin, answering each line
// with the pass's bytes/s. This VM's bandwidth changes state within seconds, so a program's figure is held to the
// passes read just before and after it, as bench_cpu_decode holds its decode to passes read between its segments.
//
// Protocol (line-oriented; stdout flushed after each line): on start "ready PATTERN BYTES_PER_S"; for each stdin line
// LABEL, "LABEL BYTES_PER_S". At end of input a table of the passes goes to stderr and the JSON to --json.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_json.hpp"
#include "bench/memory_bandwidth.hpp"
#include "util/json_writer.hpp"
#include "util/thread_pool.hpp"

using namespace actorllm;

int main(int argc, char** argv) {
  CLI::App app{"Memory-bandwidth probe passes on demand: one pass of the probe's best pattern per line of stdin"};
  int threads = 0;
  std::string json_path = "bench/results/probe_passes.json";
  app.add_option("--threads", threads, "Threads reading (default: all cores)");
  app.add_option("--json", json_path, "Where to write the passes")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (threads < 0) {
    std::fprintf(stderr, "--threads: must be at least 0 (0: all cores), got %d\n", threads);
    return 2;
  }

  thread_pool pool(threads > 0 ? threads : thread_pool::global().size());
  bench::probe_buffer buffer{pool};
  const bench::bandwidth_probe probe = bench::probe_read_bandwidth(buffer);
  std::printf("ready %s %.0f\n", probe.best.name().c_str(), probe.bytes_per_s);
  std::fflush(stdout);

  std::vector<std::pair<std::string, double>> passes;
  for (std::string label; std::getline(std::cin, label);) {
    if (label.empty() || label.find_first_of(" \t\"\\") != std::string::npos)
      label = "pass" + std::to_string(passes.size() + 1);  // one token per answer, and plain JSON
    passes.emplace_back(label, buffer.pass(probe.best));
    std::printf("%s %.0f\n", label.c_str(), passes.back().second);
    std::fflush(stdout);
  }

  std::fprintf(stderr, "%-32s %12s\n", "pass", "GB/s");
  std::fprintf(stderr, "%-32s %12.2f\n", ("probe, best: " + probe.best.name()).c_str(), probe.bytes_per_s / 1e9);
  for (const auto& [label, bw] : passes)
    std::fprintf(stderr, "%-32s %12.2f\n", label.c_str(), bw / 1e9);
  json_writer w;
  w.begin_object();
  w.key("benchmark").value("probe_passes");
  w.key("threads").value(pool.size());
  w.key("memory_bandwidth_bytes_per_s").value(probe.bytes_per_s);
  w.key("memory_bandwidth_best_pattern").value(probe.best.name());
  w.key("passes").begin_array();
  for (const auto& [label, bw] : passes) {
    w.begin_object();
    w.key("label").value(label);
    w.key("bytes_per_s").value(bw);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return bench::write_json_result(json_path, w.str());
}
