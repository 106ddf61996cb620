// The memory-bandwidth probe as a companion process, for reading the machine's state beside another program's run
// (bench/compare_llama_cpp.sh around llama-bench): it probes once (bench/memory_bandwidth.hpp: the best of its read
// patterns), then reads one pass of that pattern over its buffer for each line it gets on stdin, answering each line
// with the pass's bytes/s. This VM's bandwidth changes state within seconds, so a program's figure is held to the
// passes read just before and after it, as bench_cpu_decode holds its decode to passes read between its segments.
//
// Protocol (line-oriented; stdout flushed after each line): on start "ready PATTERN BYTES_PER_S"; for each stdin line
// "LABEL" (a pass in the probe's best pattern) or "LABEL STREAMS PREFETCH_BYTES NTA [LINES]" (a pass in that pattern,
// e.g. the one another bench's probe found best, NTA 0 or 1, LINES a stream's lines read in a row, 1 when left out),
// "LABEL BYTES_PER_S"; a line it cannot read is answered "error WHY". At end of input a table of the passes goes to
// stderr and the JSON to --json.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_json.hpp"
#include "bench/memory_bandwidth.hpp"
#include "util/cpu_count.hpp"
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

  thread_pool pool(threads > 0 ? threads : usable_cpu_count());
  bench::probe_buffer buffer{pool};
  const bench::bandwidth_probe probe = bench::probe_read_bandwidth(buffer);
  std::printf("ready %s %.0f\n", probe.best.name().c_str(), probe.bytes_per_s);
  std::fflush(stdout);

  struct pass_record {
    std::string label;
    bench::read_pattern pattern;
    double bytes_per_s;
  };
  std::vector<pass_record> passes;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream fields(line);
    std::string label;
    fields >> label;
    if (label.empty())
      label = "pass" + std::to_string(passes.size() + 1);
    bench::read_pattern pattern = probe.best;
    if (std::string rest; fields >> std::ws, std::getline(fields, rest), !rest.empty()) {
      std::istringstream spec(rest);
      int streams = 0, prefetch = 0, nta = 0, lines = 1;
      std::string extra;
      const bool read = static_cast<bool>(spec >> streams >> prefetch >> nta);
      if (read && !(spec >> std::ws).eof() && !(spec >> lines))
        lines = 0;  // a fourth field that is not a number
      if (!read || (spec >> extra) || streams < 1 || streams > 8 || prefetch < 0 || prefetch > 4096 ||
          (nta != 0 && nta != 1) || (lines != 1 && lines != 2 && lines != 4 && lines != 8)) {
        std::printf(
            "error '%s': expected LABEL STREAMS (1-8) PREFETCH_BYTES (0-4096) NTA (0 or 1) [LINES (1, 2, 4 or 8)]\n",
            line.c_str());
        std::fflush(stdout);
        continue;
      }
      pattern = bench::read_pattern{streams, prefetch, nta == 1, lines};
    }
    passes.push_back({label, pattern, buffer.pass(pattern)});
    std::printf("%s %.0f\n", label.c_str(), passes.back().bytes_per_s);
    std::fflush(stdout);
  }

  std::fprintf(stderr, "%-32s %-28s %12s\n", "pass", "pattern", "GB/s");
  std::fprintf(stderr, "%-32s %-28s %12.2f\n", "probe (best)", probe.best.name().c_str(), probe.bytes_per_s / 1e9);
  for (const auto& p : passes)
    std::fprintf(stderr, "%-32s %-28s %12.2f\n", p.label.c_str(), p.pattern.name().c_str(), p.bytes_per_s / 1e9);
  json_writer w;
  w.begin_object();
  w.key("benchmark").value("probe_passes");
  w.key("threads").value(pool.size());
  w.key("memory_bandwidth_bytes_per_s").value(probe.bytes_per_s);
  w.key("memory_bandwidth_best_pattern").value(probe.best.name());
  w.key("passes").begin_array();
  for (const auto& p : passes) {
    w.begin_object();
    w.key("label").value(p.label);
    w.key("pattern").value(p.pattern.name());
    w.key("bytes_per_s").value(p.bytes_per_s);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return bench::write_json_result(json_path, w.str());
}
