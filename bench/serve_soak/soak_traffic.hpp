// The soak test's traffic: the kinds of request it mixes (good, cancelled and bad ones), the outcome each must
// have, and the loop that keeps a number of them in flight for a while on one thread (asio coroutines).
#pragma once

#include "apps/bench_serve/http_client.hpp"
#include "bench/serve_soak/process_probe.hpp"

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::soak {

/// What one request of the mix does.
enum class kind : int {
  stream_completion,      ///< streamed /v1/completions to its end
  stream_chat,            ///< streamed /v1/chat/completions to its end
  completion,             ///< non-streamed, some with n, logprobs, stop or seed
  chat,                   ///< non-streamed, some with n, logprobs, stop or seed
  unknown_fields,         ///< a good request with fields the API does not know (ignored, as vLLM does)
  hang_up_mid_stream,     ///< the client resets or closes after a few events
  hang_up_before_answer,  ///< the client resets or closes right after sending the request
  hang_up_mid_request,    ///< the client closes after half the head or half the body
  malformed_json,
  invalid_value,  ///< well-formed JSON with a value out of range or of the wrong type
  unknown_model,
  wrong_route,  ///< an unknown path, or a method the path does not take
  garbage_http,
  oversized_head,  ///< a 16 KiB header
  oversized_body,  ///< a Content-Length over --max-body-bytes
  // The attacks of issue 30, each answered with a 4xx while everyone else is served:
  hostile_structured,  ///< regexes/schemas that crashed or stalled the compiler (deep nesting, a**...,
                       ///< (.{0,100}){0,100})
  hostile_limits,    ///< 100,000 stop strings, n = 10^7 or 2^31-1, 10,000 prompts x n=256, 100,000 template kwargs, 300
                     ///< tools
  batch_hang_up,     ///< a prompt list with n > 1, then the client goes away (every sequence must be aborted)
  idle_connections,  ///< 64 connections that say nothing for a while; /health must answer within 1 s meanwhile
};
constexpr int n_kinds = 19;

/// How a kind is reported and how often it is picked.
struct kind_info {
  const char* name;
  const char* expected;  ///< the outcome that counts as expected
  double weight;         ///< share of the picks (normalised)
};

/// Every kind, in the order of `kind`.
constexpr std::array<kind_info, n_kinds> kinds{{
    {"stream completion", "200, tokens, [DONE]", 14},
    {"stream chat", "200, tokens, [DONE]", 10},
    {"completion", "200, choices with finish_reason", 10},
    {"chat", "200, choices with finish_reason", 8},
    {"unknown fields", "200 (ignored, as vLLM)", 4},
    {"hang-up mid-stream", "200, then the client resets/closes", 10},
    {"hang-up before answer", "request sent, then reset/close", 6},
    {"hang-up mid-request", "half a request, then close", 3},
    {"malformed JSON", "400 error body", 5},
    {"invalid value", "400 error body", 8},
    {"unknown model", "404 error body", 3},
    {"wrong route/method", "404/405 error body", 3},
    {"garbage HTTP", "400 error body", 4},
    {"oversized head", "431 error body", 3},
    {"oversized body", "413 error body", 3},
    {"hostile structured output", "400 error body, fast", 2},
    {"hostile limits", "400 error body, fast", 2},
    {"batch hang-up", "request sent, then reset/close", 2},
    {"idle connections", "held; /health 200 within 1 s", 1},
}};

/// The requests of one kind and their outcomes.
struct tally {
  int64_t sent = 0;
  int64_t as_expected = 0;
  std::vector<std::string> examples;  ///< the first few unexpected outcomes
  int64_t unexpected() const { return sent - as_expected; }
};
using tallies = std::array<tally, n_kinds>;

/// The server under test.
struct soak_context {
  app::bench::http_target target;
  pid_t pid = 0;
  std::string model;                           ///< the "model" field of the good requests
  std::chrono::milliseconds timeout{120'000};  ///< for each request
};

/// A reading of the server process taken while the traffic runs.
struct series_point {
  double t_s = 0;  ///< seconds since the series began
  process_sample process;
};

/// The /health probe that runs beside the traffic (once a second): how it answered.
struct health_probe {
  int64_t probes = 0;
  int64_t not_ok = 0;   ///< answers other than 200, or no answer
  int64_t over_1s = 0;  ///< answers that took longer than a second
  double max_ms = 0;    ///< the slowest answer
  std::string first_problem;
};

/// One phase of traffic (warm-up or soak).
struct phase_result {
  tallies counts;
  health_probe health;
  double seconds = 0;
  bool server_died = false;  ///< the process went away (the phase stopped early)
};

/// Keeps `concurrency` requests in flight for `duration`, each worker picking kinds at random by weight (seeded by
/// `seed`), and returns when every request has ended. Appends a process reading every `sample_every` to `series`
/// (times from `series_start`) and prints a progress line to stderr every minute, headed `phase`.
phase_result run_traffic(const soak_context& c, const char* phase, std::chrono::seconds duration, int concurrency,
                         uint64_t seed, std::vector<series_point>& series,
                         std::chrono::steady_clock::time_point series_start, std::chrono::seconds sample_every);

}  // namespace actorllm::soak
