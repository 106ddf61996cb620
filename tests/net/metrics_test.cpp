// The Prometheus registry's text exposition format, the engine metrics' vLLM names, and concurrent updates.
#include "net/openai/metrics.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace actorllm::net::openai;

TEST_CASE("registry renders counters and gauges and histograms in the text exposition format") {
  metrics_registry r;
  auto& c = r.get_counter("app:requests_total", "Requests served.", {{"code", "200"}});
  auto& c2 = r.get_counter("app:requests_total", "ignored", {{"code", "500"}});
  auto& g = r.get_gauge("app:queue", "Queue \\ length\nnow.");
  auto& h = r.get_histogram("app:latency_seconds", "Latency.", {0.25, 1, 2.5}, {{"path", "/v1/\"x\""}});
  c.inc();
  c.inc(2);
  c.inc(-5);  // counters never go down
  c2.inc(0.5);
  g.set(-3);
  h.observe(0.125);
  h.observe(0.25);  // bucket bounds are inclusive (le)
  h.observe(2);
  h.observe(100);
  CHECK(&r.get_counter("app:requests_total", "", {{"code", "200"}}) == &c);
  CHECK(r.render() ==
        "# HELP app:requests_total Requests served.\n"
        "# TYPE app:requests_total counter\n"
        "app:requests_total{code=\"200\"} 3\n"
        "app:requests_total{code=\"500\"} 0.5\n"
        "# HELP app:queue Queue \\\\ length\\nnow.\n"
        "# TYPE app:queue gauge\n"
        "app:queue -3\n"
        "# HELP app:latency_seconds Latency.\n"
        "# TYPE app:latency_seconds histogram\n"
        "app:latency_seconds_bucket{path=\"/v1/\\\"x\\\"\",le=\"0.25\"} 2\n"
        "app:latency_seconds_bucket{path=\"/v1/\\\"x\\\"\",le=\"1\"} 2\n"
        "app:latency_seconds_bucket{path=\"/v1/\\\"x\\\"\",le=\"2.5\"} 3\n"
        "app:latency_seconds_bucket{path=\"/v1/\\\"x\\\"\",le=\"+Inf\"} 4\n"
        "app:latency_seconds_sum{path=\"/v1/\\\"x\\\"\"} 102.375\n"
        "app:latency_seconds_count{path=\"/v1/\\\"x\\\"\"} 4\n");
}

TEST_CASE("registry aliases: a family under a second name with the same series, refused when unknown or taken") {
  metrics_registry r;
  r.get_counter("a:x_total", "x", {{"k", "v"}}).inc(3);
  r.alias("a:x_total", "b:x_total");
  const std::string text = r.render();
  CHECK(text.find("a:x_total{k=\"v\"} 3\n") != std::string::npos);
  CHECK(text.find("# TYPE b:x_total counter\nb:x_total{k=\"v\"} 3\n") != std::string::npos);
  CHECK_THROWS_AS(r.alias("a:nothing", "b:y"), std::invalid_argument);
  CHECK_THROWS_AS(r.alias("a:x_total", "b:x_total"), std::invalid_argument);
  CHECK_THROWS_AS(r.alias("a:x_total", "a:x_total"), std::invalid_argument);
  CHECK_THROWS_AS(r.alias("a:x_total", "bad name"), std::invalid_argument);
}

TEST_CASE("registry refuses a name reused with another type and invalid names and unsorted buckets") {
  metrics_registry r;
  r.get_counter("x_total", "x");
  CHECK_THROWS_AS(r.get_gauge("x_total", "x"), std::invalid_argument);
  CHECK_THROWS_AS(r.get_gauge("bad name", "x"), std::invalid_argument);
  CHECK_THROWS_AS(r.get_gauge("9lives", "x"), std::invalid_argument);
  CHECK_THROWS_AS(r.get_histogram("h", "x", {1.0, 0.5}), std::invalid_argument);
  CHECK_THROWS_AS(r.get_histogram("h2", "x", {1.0, 1.0}), std::invalid_argument);
}

TEST_CASE("engine metrics carry vLLM's names under actorllm: and vLLM's buckets") {
  engine_metrics m{"stories260K"};
  engine_stats s;
  s.n_running = 3;
  s.n_waiting = 2;
  s.kv_cache_usage = 0.25;
  s.n_preemptions = 4;
  m.update(s);
  s.prefix_cache_queries = 100;
  s.prefix_cache_hits = 64;
  m.update(s);
  engine_stats failed;  // an engine that does not answer reports zeros: no totals, so the counters do not restart
  failed.healthy = false;
  m.update(failed);
  s.n_preemptions = 6;
  s.prefix_cache_queries = 300;
  s.prefix_cache_hits = 96;
  m.update(s);
  m.update(s);  // the same snapshot twice adds nothing
  m.observe_time_to_first_token(0.03);
  m.observe_inter_token_latency(0.02);
  m.observe_inter_token_latency(0.2);
  m.observe_finished(finish_reason::stop, 10, 20, 1.25);
  m.observe_finished(finish_reason::length, 5, 16, 0.5);
  m.observe_finished(finish_reason::abort, 1, 0, 0.125);
  std::string text = m.render();
  const std::string l = "{model_name=\"stories260K\"}";
  const std::vector<std::string> expected_lines = {
      "# TYPE actorllm:num_requests_running gauge\nactorllm:num_requests_running" + l + " 3\n",
      "actorllm:num_requests_waiting" + l + " 2\n",
      "actorllm:kv_cache_usage_perc" + l + " 0.25\n",
      "# TYPE actorllm:num_preemptions_total counter\nactorllm:num_preemptions_total" + l + " 6\n",
      "actorllm:prompt_tokens_total" + l + " 16\n",
      "# TYPE actorllm:prefix_cache_queries_total counter\nactorllm:prefix_cache_queries_total" + l + " 300\n",
      "actorllm:prefix_cache_hits_total" + l + " 96\n",
      "actorllm:generation_tokens_total" + l + " 36\n",
      "# TYPE actorllm:time_to_first_token_seconds histogram\n",
      "actorllm:time_to_first_token_seconds_bucket{model_name=\"stories260K\",le=\"0.02\"} 0\n",
      "actorllm:time_to_first_token_seconds_bucket{model_name=\"stories260K\",le=\"0.04\"} 1\n",
      "actorllm:time_to_first_token_seconds_bucket{model_name=\"stories260K\",le=\"2560\"} 1\n",
      "actorllm:inter_token_latency_seconds_bucket{model_name=\"stories260K\",le=\"0.025\"} 1\n",
      "actorllm:inter_token_latency_seconds_bucket{model_name=\"stories260K\",le=\"0.2\"} 2\n",
      "actorllm:inter_token_latency_seconds_count" + l + " 2\n",
      "actorllm:e2e_request_latency_seconds_bucket{model_name=\"stories260K\",le=\"0.3\"} 1\n",
      "actorllm:e2e_request_latency_seconds_bucket{model_name=\"stories260K\",le=\"1.5\"} 3\n",
      "actorllm:e2e_request_latency_seconds_bucket{model_name=\"stories260K\",le=\"7680\"} 3\n",
      "actorllm:e2e_request_latency_seconds_sum" + l + " 1.875\n",
      "actorllm:request_success_total{model_name=\"stories260K\",finished_reason=\"stop\"} 1\n",
      "actorllm:request_success_total{model_name=\"stories260K\",finished_reason=\"length\"} 1\n",
      "actorllm:request_success_total{model_name=\"stories260K\",finished_reason=\"abort\"} 1\n",
  };
  for (const std::string& line : expected_lines) {
    CAPTURE(line);
    CHECK(text.find(line) != std::string::npos);
    // The same series under vLLM's name (its dashboards read vllm:...).
    std::string vllm = line;
    for (std::size_t at; (at = vllm.find("actorllm:")) != std::string::npos;)
      vllm.replace(at, 9, "vllm:");
    CAPTURE(vllm);
    CHECK(text.find(vllm) != std::string::npos);
  }
  // vLLM's older names for two of them.
  CHECK(text.find("vllm:gpu_cache_usage_perc" + l + " 0.25\n") != std::string::npos);
  CHECK(text.find("vllm:time_per_output_token_seconds_count" + l + " 2\n") != std::string::npos);
  CHECK(text.find("vllm:request_failovers_total") == std::string::npos);  // ours alone: no vLLM name claimed
  CHECK(ttft_buckets().size() == 22);
  CHECK(inter_token_latency_buckets().size() == 19);
  CHECK(e2e_latency_buckets().size() == 21);
  // One HELP and one TYPE per family, every sample line is `name[{labels}] value`.
  std::size_t pos = 0;
  int type_lines = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    REQUIRE(end != std::string::npos);
    std::string line = text.substr(pos, end - pos);
    if (line.rfind("# TYPE ", 0) == 0)
      ++type_lines;
    else if (line.rfind("# HELP ", 0) != 0) {
      CAPTURE(line);
      CHECK((line.rfind("actorllm:", 0) == 0 || line.rfind("vllm:", 0) == 0));
      CHECK(line.find(' ') != std::string::npos);
      CHECK(line.find(' ') == line.rfind(' '));
    }
    pos = end + 1;
  }
  CHECK(type_lines == 13 + static_cast<int>(vllm_metric_aliases().size()));
}

TEST_CASE("metrics updates from many threads are all counted [asan]") {
  engine_metrics m{"m"};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&m] {
      for (int i = 0; i < 2000; ++i) {
        m.observe_finished(finish_reason::stop, 1, 2, 0.5);
        m.observe_inter_token_latency(0.01);
        if (i % 100 == 0)
          (void)m.render();
      }
    });
  for (auto& t : threads)
    t.join();
  std::string text = m.render();
  CHECK(text.find("actorllm:prompt_tokens_total{model_name=\"m\"} 8000\n") != std::string::npos);
  CHECK(text.find("actorllm:generation_tokens_total{model_name=\"m\"} 16000\n") != std::string::npos);
  CHECK(text.find("actorllm:inter_token_latency_seconds_count{model_name=\"m\"} 8000\n") != std::string::npos);
  CHECK(text.find("actorllm:request_success_total{model_name=\"m\",finished_reason=\"stop\"} 8000\n") !=
        std::string::npos);
}

TEST_CASE("MoE engines: the load of each expert is a counter labelled by expert id, absent for dense models") {
  engine_metrics m{"mixtral"};
  engine_stats s;
  m.update(s);
  CHECK(m.render().find("expert_tokens_total") == std::string::npos);  // dense: no family at all
  s.expert_tokens = {4, 0, 7};
  m.update(s);
  s.expert_tokens = {6, 1, 7};
  m.update(s);
  const std::string text = m.render();
  CHECK(text.find("ep_exchange_bytes_total") == std::string::npos);  // no exchange yet: no family
  s.ep_exchange_bytes = 4096;
  m.update(s);
  s.ep_exchange_bytes = 0;  // a restarted engine counts from 0 again
  m.update(s);
  s.ep_exchange_bytes = 1000;
  m.update(s);
  CHECK(m.render().find("actorllm:ep_exchange_bytes_total{model_name=\"mixtral\"} 5096\n") != std::string::npos);
  for (const std::string line : {"# TYPE actorllm:expert_tokens_total counter\n",
                                 "actorllm:expert_tokens_total{model_name=\"mixtral\",expert=\"0\"} 6\n",
                                 "actorllm:expert_tokens_total{model_name=\"mixtral\",expert=\"1\"} 1\n",
                                 "actorllm:expert_tokens_total{model_name=\"mixtral\",expert=\"2\"} 7\n"}) {
    CAPTURE(line);
    CHECK(text.find(line) != std::string::npos);
  }
}

TEST_CASE("data-parallel replicas: series labelled by replica, totals that survive one replica's restart") {
  engine_metrics m{"m"};
  engine_stats s;
  s.replicas.resize(2);
  s.replicas[0].rank = 0;
  s.replicas[0].n_running = 3;
  s.replicas[0].n_preemptions = 5;
  s.replicas[0].routed_requests = 10;
  s.replicas[1].rank = 1;
  s.replicas[1].n_preemptions = 2;
  s.replicas[1].routed_requests = 7;
  s.n_failovers = 0;
  m.update(s);
  // Replica 1 died and came back: its totals start from 0 again, replica 0's keep going.
  s.replicas[1].n_preemptions = 1;
  s.replicas[1].restarts = 1;
  s.replicas[1].routed_requests = 9;
  s.replicas[0].n_preemptions = 6;
  s.n_failovers = 4;
  m.update(s);
  s.replicas[1].healthy = false;
  s.replicas[1].failure = "worker 0 is gone";
  m.update(s);
  const std::string text = m.render();
  CHECK(text.find("actorllm:num_requests_running{model_name=\"m\",replica=\"0\"} 3") != std::string::npos);
  CHECK(text.find("actorllm:replica_healthy{model_name=\"m\",replica=\"1\"} 0") != std::string::npos);
  CHECK(text.find("actorllm:replica_healthy{model_name=\"m\",replica=\"0\"} 1") != std::string::npos);
  CHECK(text.find("actorllm:replica_routed_requests_total{model_name=\"m\",replica=\"1\"} 9") != std::string::npos);
  CHECK(text.find("actorllm:replica_restarts_total{model_name=\"m\",replica=\"1\"} 1") != std::string::npos);
  CHECK(text.find("actorllm:num_preemptions_total{model_name=\"m\"} 9") !=
        std::string::npos);  // 5 + 2, then +1 and the new 1
  CHECK(text.find("actorllm:request_failovers_total{model_name=\"m\"} 4") != std::string::npos);
}
