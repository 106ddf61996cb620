// Serving metrics from per-request timings, following vLLM's calculate_metrics and its result table.
#include "apps/bench_serve/serve_metrics.hpp"

#include "util/json_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace actorllm::app::bench {

double percentile(std::vector<double> values, double p) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

metric_summary summarise(const std::vector<double>& seconds, const std::vector<double>& percentiles) {
  metric_summary s;
  if (!seconds.empty()) {
    const double n = static_cast<double>(seconds.size());
    const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
    double var = 0;
    for (double v : seconds)
      var += (v - mean) * (v - mean);
    s.mean_ms = mean * 1000;
    s.std_ms = std::sqrt(var / n) * 1000;
    s.median_ms = percentile(seconds, 50) * 1000;
  }
  for (double p : percentiles)
    s.percentiles_ms.emplace_back(p, percentile(seconds, p) * 1000);
  return s;
}

benchmark_metrics compute_metrics(const std::vector<request_result>& results, double duration_s,
                                  const std::vector<double>& percentiles) {
  benchmark_metrics m;
  m.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const auto& r : results) {
    if (!r.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_len;
    m.total_output_tokens += r.output_tokens;
    if (r.output_tokens > 1)
      tpots.push_back((r.latency - r.ttft) / static_cast<double>(r.output_tokens - 1));
    itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    ttfts.push_back(r.ttft);
    e2els.push_back(r.latency);
  }
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
  }
  m.ttft = summarise(ttfts, percentiles);
  m.tpot = summarise(tpots, percentiles);
  m.itl = summarise(itls, percentiles);
  m.e2el = summarise(e2els, percentiles);
  return m;
}

namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss{text};
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty())
      out.push_back(item);
  }
  return out;
}

struct metric_view {
  const char* name;    // "ttft"
  const char* upper;   // "TTFT"
  const char* header;  // the table's section title
  const metric_summary* summary;
};

std::vector<metric_view> selected_metrics(const run_description& run, const benchmark_metrics& m) {
  const metric_view all[] = {
      {"ttft", "TTFT", "Time to First Token", &m.ttft},
      {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &m.tpot},
      {"itl", "ITL", "Inter-token Latency", &m.itl},
      {"e2el", "E2EL", "End-to-end Latency", &m.e2el},
  };
  std::vector<metric_view> out;
  for (const auto& v : all)
    if (std::find(run.percentile_metrics.begin(), run.percentile_metrics.end(), v.name) != run.percentile_metrics.end())
      out.push_back(v);
  return out;
}

}  // namespace

std::vector<double> parse_percentiles(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  for (const auto& item : split_commas(text)) {
    std::size_t used = 0;
    double p = 0;
    try {
      p = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !(p >= 0 && p <= 100))
      throw std::invalid_argument(fmt::format("{}: '{}' is not a percentile in [0, 100]", flag, item));
    out.push_back(p);
  }
  return out;
}

std::vector<std::string> parse_metric_names(const std::string& text, const std::string& flag) {
  std::vector<std::string> out = split_commas(text);
  for (const auto& name : out)
    if (name != "ttft" && name != "tpot" && name != "itl" && name != "e2el")
      throw std::invalid_argument(fmt::format("{}: '{}' is not one of ttft, tpot, itl, e2el", flag, name));
  return out;
}

std::string percentile_word(double p) {
  if (p == std::floor(p))
    return fmt::format("{}", static_cast<int64_t>(p));
  return fmt::format("{}", p);
}

std::string format_table(const run_description& run, const benchmark_metrics& m) {
  std::string out;
  auto line = [&](std::string_view label, std::string value) { out += fmt::format("{:<40} {:<10}\n", label, value); };
  auto num = [](double v) { return fmt::format("{:.2f}", v); };
  out += fmt::format("{:=^50}\n", " Serving Benchmark Result ");
  line("Successful requests:", std::to_string(m.completed));
  line("Failed requests:", std::to_string(m.failed));
  if (run.max_concurrency > 0)
    line("Maximum request concurrency:", std::to_string(run.max_concurrency));
  line("Benchmark duration (s):", num(m.duration_s));
  line("Total input tokens:", std::to_string(m.total_input_tokens));
  line("Total generated tokens:", std::to_string(m.total_output_tokens));
  line("Request throughput (req/s):", num(m.request_throughput));
  line("Output token throughput (tok/s):", num(m.output_throughput));
  line("Total Token throughput (tok/s):", num(m.total_token_throughput));
  for (const auto& v : selected_metrics(run, m)) {
    out += fmt::format("{:-^50}\n", v.header);
    line(fmt::format("Mean {} (ms):", v.upper), num(v.summary->mean_ms));
    line(fmt::format("Median {} (ms):", v.upper), num(v.summary->median_ms));
    for (const auto& [p, value] : v.summary->percentiles_ms)
      line(fmt::format("P{} {} (ms):", percentile_word(p), v.upper), num(value));
  }
  out += std::string(50, '=') + "\n";
  return out;
}

std::string to_json(const run_description& run, const benchmark_metrics& m,
                    const std::vector<request_result>& results) {
  json_writer w;
  w.begin_object();
  w.key("date").value(run.date);
  w.key("backend").value("openai");
  w.key("base_url").value(run.base_url);
  w.key("endpoint").value(run.endpoint);
  w.key("model_id").value(run.model_id);
  w.key("num_prompts").value(run.num_prompts);
  if (std::isinf(run.request_rate))
    w.key("request_rate").value("inf");  // vLLM writes the string too: JSON has no infinity
  else
    w.key("request_rate").value(run.request_rate);
  w.key("burstiness").value(run.burstiness);
  w.key("max_concurrency");
  if (run.max_concurrency > 0)
    w.value(run.max_concurrency);
  else
    w.null();
  w.key("duration").value(m.duration_s);
  w.key("completed").value(m.completed);
  w.key("failed").value(m.failed);
  w.key("total_input_tokens").value(m.total_input_tokens);
  w.key("total_output_tokens").value(m.total_output_tokens);
  w.key("request_throughput").value(m.request_throughput);
  w.key("output_throughput").value(m.output_throughput);
  w.key("total_token_throughput").value(m.total_token_throughput);
  for (const auto& v : selected_metrics(run, m)) {
    w.key(fmt::format("mean_{}_ms", v.name)).value(v.summary->mean_ms);
    w.key(fmt::format("median_{}_ms", v.name)).value(v.summary->median_ms);
    w.key(fmt::format("std_{}_ms", v.name)).value(v.summary->std_ms);
    for (const auto& [p, value] : v.summary->percentiles_ms)
      w.key(fmt::format("p{}_{}_ms", percentile_word(p), v.name)).value(value);
  }
  w.key("input_lens").begin_array();
  for (const auto& r : results)
    w.value(r.prompt_len);
  w.end_array();
  w.key("output_lens").begin_array();
  for (const auto& r : results)
    w.value(r.success ? r.output_tokens : int64_t{0});
  w.end_array();
  w.key("ttfts").begin_array();
  for (const auto& r : results)
    w.value(r.ttft);
  w.end_array();
  w.key("itls").begin_array();
  for (const auto& r : results) {
    w.begin_array();
    for (double g : r.itl)
      w.value(g);
    w.end_array();
  }
  w.end_array();
  w.key("errors").begin_array();
  for (const auto& r : results)
    w.value(r.error);
  w.end_array();
  w.end_object();
  return w.take();
}

}  // namespace actorllm::app::bench
