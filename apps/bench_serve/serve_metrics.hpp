// What one benchmark request measured, and the serving metrics computed from all of them, with vLLM's
// definitions (benchmarks/serve.py, calculate_metrics): TTFT, TPOT, ITL, E2EL, throughputs. Pure: no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::app::bench {

/// One request's outcome. Times in seconds; `itl` holds the gaps between consecutive chunks that carried tokens.
struct request_result {
  bool success = false;
  std::string error;          ///< why it failed (HTTP status and body, timeout, connection error)
  int64_t prompt_len = 0;     ///< tokens in the prompt
  int64_t output_tokens = 0;  ///< from the final chunk's usage, else the number of token-carrying chunks
  double ttft = 0;            ///< request start to the first chunk with text
  double latency = 0;         ///< request start to the end of the response (E2EL)
  std::vector<double> itl;    ///< inter-token latencies
  double start_time = 0;      ///< seconds since the benchmark started
};

/// Linear-interpolation percentile (numpy's default method) of `values`, `p` in [0, 100]; 0 when empty.
double percentile(std::vector<double> values, double p);

/// Mean, median, standard deviation (population) and the asked percentiles of one metric, in milliseconds.
struct metric_summary {
  double mean_ms = 0;
  double median_ms = 0;
  double std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  ///< (p, value)
};

/// Summarises `seconds` (0 everywhere when empty, as vLLM's `np.mean(x or 0)`).
metric_summary summarise(const std::vector<double>& seconds, const std::vector<double>& percentiles);

/// The benchmark's result, as vLLM's serving benchmark reports it.
struct benchmark_metrics {
  int64_t completed = 0;
  int64_t failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0;   ///< of the successful requests
  int64_t total_output_tokens = 0;  ///< of the successful requests
  double request_throughput = 0;    ///< completed / duration
  double output_throughput = 0;     ///< output tokens / duration
  double total_token_throughput = 0;
  metric_summary ttft;
  metric_summary tpot;  ///< over requests with more than one output token: (e2el - ttft) / (output_tokens - 1)
  metric_summary itl;   ///< over every inter-token gap of every successful request
  metric_summary e2el;
};

/// Aggregates per-request results over a run that took `duration_s` seconds.
benchmark_metrics compute_metrics(const std::vector<request_result>& results, double duration_s,
                                  const std::vector<double>& percentiles);

/// Parses "50,90,99" into numbers in [0, 100]; throws std::invalid_argument naming `flag` otherwise.
std::vector<double> parse_percentiles(const std::string& text, const std::string& flag);

/// Parses "ttft,tpot,itl,e2el" (any subset); throws std::invalid_argument naming `flag` on an unknown name.
std::vector<std::string> parse_metric_names(const std::string& text, const std::string& flag);

/// How a percentile appears in names: 99 -> "99", 99.9 -> "99.9".
std::string percentile_word(double p);

/// What the table and JSON describe besides the metrics.
struct run_description {
  std::string date;  ///< e.g. "20261122-023000"
  std::string base_url;
  std::string endpoint;
  std::string model_id;
  int64_t num_prompts = 0;
  double request_rate = 0;  ///< requests per second; infinity for "all at once"
  double burstiness = 1;
  int64_t max_concurrency = 0;  ///< 0: none
  std::vector<std::string> percentile_metrics;
};

/// vLLM's "============ Serving Benchmark Result ============" table.
std::string format_table(const run_description& run, const benchmark_metrics& m);

/// The result as one JSON object with vLLM's field names (mean_ttft_ms, p99_itl_ms, request_throughput, ...),
/// plus the per-request input_lens, output_lens, ttfts, itls and errors.
std::string to_json(const run_description& run, const benchmark_metrics& m, const std::vector<request_result>& results);

}  // namespace actorllm::app::bench
