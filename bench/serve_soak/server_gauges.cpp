// Prometheus text from the server's /metrics, summed per metric name, for the soak test.
#include "bench/serve_soak/server_gauges.hpp"

#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>

namespace actorllm::soak {

double metric_sum(std::string_view text, std::string_view name, std::string_view label) {
  double sum = 0;
  bool found = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos)
      eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line.front() == '#' || line.rfind(name, 0) != 0 || line.size() == name.size())
      continue;
    const char after = line[name.size()];
    if (after != '{' && after != ' ')
      continue;  // a longer name with this one as its prefix
    if (!label.empty() && line.find(label) == std::string_view::npos)
      continue;
    const std::size_t space = line.rfind(' ');
    try {
      sum += std::stod(std::string{line.substr(space + 1)});
      found = true;
    } catch (const std::exception&) {
    }
  }
  return found ? sum : std::nan("");
}

server_gauges read_gauges(const app::bench::http_target& t) {
  const app::bench::http_reply r = app::bench::http_call(t, "GET", "/metrics", {}, std::chrono::seconds{10});
  if (r.status != 200)
    throw std::runtime_error(fmt::format("GET /metrics answered {}", r.status));
  server_gauges g;
  g.kv_usage = metric_sum(r.body, "actorllm:kv_cache_usage_perc");
  g.running = metric_sum(r.body, "actorllm:num_requests_running");
  g.waiting = metric_sum(r.body, "actorllm:num_requests_waiting");
  g.aborted = metric_sum(r.body, "actorllm:request_success_total", R"(finished_reason="abort")");
  if (std::isnan(g.aborted))
    g.aborted = 0;  // the series appears with the first abort
  if (std::isnan(g.kv_usage) || std::isnan(g.running) || std::isnan(g.waiting))
    throw std::runtime_error("GET /metrics lacks actorllm:kv_cache_usage_perc or the running/waiting gauges");
  return g;
}

}  // namespace actorllm::soak
