// Checks of a data-parallel `actorllm serve`: every replica gives the golden continuation; and the failover scenario,
// for any way of killing a replica: 32 temperature-0 completions of tests/support/story_prompts.hpp run undisturbed,
// then again as SSE streams while `kill` takes replica 1 down once it runs; every stream must end with [DONE] and no
// error, its text equal to the undisturbed one, and /health must stay 200 throughout. Then replica 1 must come back and
// take requests again. Header-only; used by tests/e2e_server (a worker killed) and tests/e2e_cluster (a node agent
// killed).
#pragma once

#include "e2e_server/server_harness.hpp"
#include "support/story_prompts.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace actorllm::e2e {

inline std::string story_body(const std::string& prompt, bool stream) {
  return std::string{R"({"model":"stories","temperature":0,"max_tokens":300,"ignore_eos":true,"stream":)"} +
         (stream ? "true" : "false") + R"(,"prompt":")" + prompt + R"("})";
}

/// The text of a non-streamed completion's reply, or what came instead ("HTTP <status>" and the body, or the client's
/// error): the reference texts are compared, so anything else fails there. No doctest assertion: client threads call
/// it.
inline std::string completion_text(const http_reply& r) {
  if (r.status != 200)
    return "HTTP " + std::to_string(r.status) + ": " + (r.error.empty() ? r.body : r.error);
  simdjson::dom::parser parser;
  std::string_view text;
  if (parser.parse(r.body)["choices"].at(0)["text"].get(text) != simdjson::SUCCESS)
    return "not a completion: " + r.body;
  return std::string{text};
}

struct sse_result {
  std::string text;
  bool done = false;
  std::string error;
};

/// The concatenated text of an SSE completion stream, whether it ended with [DONE], and any error event.
inline sse_result parse_sse(const std::string& body) {
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
inline double metric(uint16_t port, const std::string& series) {
  return metric(http(port, "GET", "/metrics").body, series).value_or(-1);
}

/// Sends 4 × `replicas` greedy "Once upon a time" completions at once: each is the golden continuation, and every
/// replica served some (the prompt fills no KV block, so the router goes by load alone).
inline void check_golden_on_every_replica(uint16_t port, int replicas) {
  const std::string golden = golden_continuation();
  const std::string body = R"({"model":"stories","prompt":"Once upon a time","max_tokens":48,"temperature":0})";
  std::vector<std::string> texts(static_cast<size_t>(4 * replicas));
  std::vector<std::thread> clients;
  for (size_t i = 0; i < texts.size(); ++i)
    clients.emplace_back([&, i] { texts[i] = completion_text(http(port, "POST", "/v1/completions", body)); });
  for (auto& t : clients)
    t.join();
  for (const auto& text : texts) {
    CHECK(text.size() > 100);
    CHECK_MESSAGE(golden.rfind(text, 0) == 0, text);
  }
  for (int r = 0; r < replicas; ++r) {
    CAPTURE(r);
    CHECK(metric(port, R"(actorllm:replica_routed_requests_total{model_name="stories",replica=")" + std::to_string(r) +
                           R"("})") > 0);
  }
}

/// The story prompts' texts, all sent at once and undisturbed; checks that replica 1 took a share.
inline std::vector<std::string> undisturbed_stories(uint16_t port) {
  const auto all = test::story_prompts();
  std::vector<std::string> reference(all.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < all.size(); ++i)
    clients.emplace_back(
        [&, i] { reference[i] = completion_text(http(port, "POST", "/v1/completions", story_body(all[i], false))); });
  for (auto& t : clients)
    t.join();
  REQUIRE(metric(port, R"(actorllm:replica_routed_requests_total{model_name="stories",replica="1"})") > 0);
  return reference;
}

/// The story prompts as SSE streams; `kill` runs once replica 1 runs 4 of them (and none has ended). Checks every
/// stream against `reference`, /health throughout, and that requests moved.
inline void check_streams_survive(uint16_t port, const std::vector<std::string>& reference,
                                  const std::function<void()>& kill) {
  const auto all = test::story_prompts();
  std::vector<std::string> streamed(all.size());
  std::atomic<int> ended{0};
  std::atomic<bool> polling{true};
  std::atomic<int> unhealthy{0};
  std::string unhealthy_body;
  std::thread health{[&] {
    while (polling) {
      auto h = http(port, "GET", "/health");
      if (h.status != 200 && unhealthy++ == 0)
        unhealthy_body = h.body;
      std::this_thread::sleep_for(20ms);  // a polling interval, not a synchronization
    }
  }};
  std::vector<std::thread> clients;
  for (size_t i = 0; i < all.size(); ++i)
    clients.emplace_back([&, i] {
      streamed[i] = http(port, "POST", "/v1/completions", story_body(all[i], true)).body;
      ++ended;
    });
  const std::string running = R"(actorllm:num_requests_running{model_name="stories",replica="1"})";
  const auto deadline = steady::now() + 20s;
  while (metric(port, running) < 4 && steady::now() < deadline)
    std::this_thread::sleep_for(5ms);
  CHECK(ended.load() == 0);
  kill();
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
}

/// Waits (up to `limit`) for /health to list no degraded replica, then checks that replica 1 takes requests again
/// and answers them as undisturbed.
inline void check_replica_back(uint16_t port, const std::vector<std::string>& reference, std::chrono::seconds limit) {
  const auto back_by = steady::now() + limit;
  while (http(port, "GET", "/health").body.find(R"("degraded":[])") == std::string::npos && steady::now() < back_by)
    std::this_thread::sleep_for(20ms);
  REQUIRE(http(port, "GET", "/health").body.find(R"("degraded":[])") != std::string::npos);
  const std::string routed1 = R"(actorllm:replica_routed_requests_total{model_name="stories",replica="1"})";
  const double before = metric(port, routed1);
  const auto all = test::story_prompts();
  std::vector<std::thread> again;
  std::atomic<int> matched{0};
  for (size_t i = 0; i < 8; ++i)
    again.emplace_back([&, i] {
      if (completion_text(http(port, "POST", "/v1/completions", story_body(all[i], false))) == reference[i])
        ++matched;
    });
  for (auto& t : again)
    t.join();
  CHECK(matched.load() == 8);
  CHECK(metric(port, routed1) > before);
}

}  // namespace actorllm::e2e
