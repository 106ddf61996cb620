// Data-parallel serving end to end: `serve -dp 2` (mp executor, one worker process per replica) under 32 concurrent
// temperature-0 SSE streams, one replica's worker killed with SIGKILL mid-stream. Every stream ends with [DONE] and
// no error, its text equal to the same request run undisturbed; /health stays 200 throughout; the killed replica
// restarts and takes traffic again.
#include "e2e_server/server_harness.hpp"
#include "story_prompts.hpp"
#include "worker_processes.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <signal.h>

#include <atomic>
#include <thread>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

std::string body_for(const std::string& prompt, bool stream) {
  return std::string{R"({"model":"stories","temperature":0,"max_tokens":300,"ignore_eos":true,"stream":)"} +
         (stream ? "true" : "false") + R"(,"prompt":")" + prompt + R"("})";
}

/// The text of a non-streamed completion.
std::string completion_text(const std::string& body) {
  simdjson::dom::parser parser;
  std::string_view text;
  REQUIRE_MESSAGE(parser.parse(body)["choices"].at(0)["text"].get(text) == simdjson::SUCCESS, body);
  return std::string{text};
}

struct sse_result {
  std::string text;
  bool done = false;
  std::string error;
};

/// The concatenated text of an SSE completion stream, whether it ended with [DONE], and any error event.
sse_result parse_sse(const std::string& body) {
  sse_result r;
  simdjson::dom::parser parser;
  std::size_t pos = 0;
  while (pos < body.size()) {
    std::size_t end = body.find('\n', pos);
    if (end == std::string::npos)
      end = body.size();
    std::string_view line{body.data() + pos, end - pos};
    pos = end + 1;
    if (!line.starts_with("data: "))
      continue;
    line.remove_prefix(6);
    if (line == "[DONE]") {
      r.done = true;
      continue;
    }
    simdjson::dom::element doc;
    if (parser.parse(line.data(), line.size()).get(doc) != simdjson::SUCCESS) {
      r.error = "unparsable event: " + std::string{line};
      continue;
    }
    if (doc["error"].error() == simdjson::SUCCESS) {
      r.error = std::string{line};
      continue;
    }
    std::string_view piece;
    if (doc["choices"].at(0)["text"].get(piece) == simdjson::SUCCESS)
      r.text += piece;
  }
  return r;
}

/// The value of the first /metrics sample line starting with `series` (-1 when absent).
double metric(uint16_t port, const std::string& series) {
  const std::string text = e2e::http(port, "GET", "/metrics").body;
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos)
    return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

}  // namespace

TEST_CASE("serve -dp 2: kill -9 of one replica's worker under 32 greedy SSE streams: all end as undisturbed") {
  e2e::server srv{
      {"-dp", "2", "--distributed-executor-backend", "mp", "--max-num-seqs", "8", "--kv-cache-memory", "4MiB"},
      {"ACTORLLM_WORKER_BIN=" + test::actorllm_binary().string(), "ACTORLLM_CPU_DEVICES=2"}};
  const uint16_t port = srv.port();
  const auto all = test::story_prompts();

  // Undisturbed, all at once.
  std::vector<std::string> reference(all.size());
  {
    std::vector<std::thread> clients;
    for (size_t i = 0; i < all.size(); ++i)
      clients.emplace_back([&, i] {
        auto r = e2e::http(port, "POST", "/v1/completions", body_for(all[i], false));
        reference[i] = r.status == 200 ? completion_text(r.body) : "HTTP " + std::to_string(r.status) + r.body;
      });
    for (auto& t : clients)
      t.join();
  }
  const std::string routed1 = R"(actorllm:replica_routed_requests_total{model_name="stories",replica="1"})";
  REQUIRE(metric(port, routed1) > 0);  // both replicas took a share

  std::vector<std::string> streamed(all.size());
  std::atomic<int> ended{0};
  std::atomic<bool> polling{true};
  std::atomic<int> unhealthy{0};
  std::string unhealthy_body;
  std::thread health{[&] {
    while (polling) {
      auto h = e2e::http(port, "GET", "/health");
      if (h.status != 200 && unhealthy++ == 0)
        unhealthy_body = h.body;
      std::this_thread::sleep_for(20ms);
    }
  }};
  std::vector<std::thread> clients;
  for (size_t i = 0; i < all.size(); ++i)
    clients.emplace_back([&, i] {
      streamed[i] = e2e::http(port, "POST", "/v1/completions", body_for(all[i], true)).body;
      ++ended;
    });
  // Kill once both replicas are busy (8 running each, the rest waiting).
  const std::string running = R"(actorllm:num_requests_running{model_name="stories",replica="1"})";
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (metric(port, running) < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  const auto victims = test::worker_pids_of(srv.pid(), "--replica 1");
  REQUIRE(victims.size() == 1);
  CHECK(ended.load() == 0);
  ::kill(victims.front(), SIGKILL);
  for (auto& t : clients)
    t.join();
  polling = false;
  health.join();

  CHECK_MESSAGE(unhealthy.load() == 0,
                "/health answered non-200 " << unhealthy.load() << " time(s): " << unhealthy_body);
  const double failovers = metric(port, R"(actorllm:request_failovers_total{model_name="stories"})");
  MESSAGE(failovers << " request(s) moved to replica 0");
  CHECK(failovers > 0);
  for (size_t i = 0; i < all.size(); ++i) {
    CAPTURE(i);
    const sse_result r = parse_sse(streamed[i]);
    CHECK_MESSAGE(r.error.empty(), r.error);
    CHECK(r.done);
    CHECK(r.text == reference[i]);
  }

  // Replica 1 comes back (a new worker) and takes requests again.
  const auto back_by = std::chrono::steady_clock::now() + 30s;
  while (e2e::http(port, "GET", "/health").body.find(R"("degraded":[])") == std::string::npos &&
         std::chrono::steady_clock::now() < back_by)
    std::this_thread::sleep_for(20ms);
  REQUIRE(e2e::http(port, "GET", "/health").body.find(R"("degraded":[])") != std::string::npos);
  CHECK(test::worker_pids_of(srv.pid(), "--replica 1").size() == 1);
  const double before = metric(port, routed1);
  std::vector<std::thread> again;
  std::atomic<int> matched{0};
  for (size_t i = 0; i < 8; ++i)
    again.emplace_back([&, i] {
      auto r = e2e::http(port, "POST", "/v1/completions", body_for(all[i], false));
      if (r.status == 200 && completion_text(r.body) == reference[i])
        ++matched;
    });
  for (auto& t : again)
    t.join();
  CHECK(matched.load() == 8);
  CHECK(metric(port, routed1) > before);
  CHECK(metric(port, R"(actorllm:replica_restarts_total{model_name="stories",replica="1"})") == 1);
}
