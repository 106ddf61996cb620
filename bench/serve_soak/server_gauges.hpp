// What the soak test reads of the server's /metrics: KV-cache usage, running and waiting requests, aborts.
#pragma once

#include "apps/bench_serve/http_client.hpp"

#include <cmath>
#include <string_view>

namespace actorllm::soak {

/// The sum over every series of `name` in Prometheus text whose labels contain `label` (empty: all series); NaN
/// when there is none. Pure.
double metric_sum(std::string_view text, std::string_view name, std::string_view label = {});

/// The gauges (and the abort counter) of one GET /metrics.
struct server_gauges {
  double kv_usage = std::nan("");  ///< actorllm:kv_cache_usage_perc (1 = full)
  double running = std::nan("");   ///< actorllm:num_requests_running
  double waiting = std::nan("");   ///< actorllm:num_requests_waiting
  double aborted = std::nan("");   ///< requests finished as aborted so far (a counter)
};

/// GETs /metrics; throws std::runtime_error when it fails or lacks a gauge.
server_gauges read_gauges(const app::bench::http_target& t);

}  // namespace actorllm::soak
