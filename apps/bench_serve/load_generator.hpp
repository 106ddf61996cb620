// Runs a benchmark's requests against a server: sent at their arrival offsets, at most max_concurrency at once,
// all on one thread (asio coroutines), each request's chunks timed by stream_completion.
#pragma once

#include "apps/bench_serve/http_client.hpp"
#include "apps/bench_serve/serve_metrics.hpp"
#include "apps/bench_serve/workload.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::app::bench {

/// How each request is made.
struct request_options {
  std::string model;
  bool ignore_eos = true;
  std::optional<int32_t> logprobs;  ///< "logprobs": N (0: the sampled token's only)
  double temperature = 0;           ///< vLLM's benchmark samples greedily
};

/// The /v1/completions body of `r`: token-id prompt, stream with stream_options.include_usage.
std::string completion_body(const bench_request& r, const request_options& o);

/// A whole run.
struct load_plan {
  http_target target;
  std::string path;  ///< base URL prefix + endpoint
  request_options request;
  std::vector<bench_request> requests;
  std::vector<double> offsets;  ///< seconds from the start, one per request (arrival_offsets)
  int64_t max_concurrency = 0;  ///< 0: unbounded
  std::chrono::milliseconds timeout{600'000};
};

/// What a run measured.
struct load_outcome {
  std::vector<request_result> results;  ///< in request order
  double duration_s = 0;                ///< first send to last completion
};

/// Runs `plan` to completion (every request ends: done, failed, or timed out) on the calling thread.
load_outcome run_load(const load_plan& plan);

}  // namespace actorllm::app::bench
