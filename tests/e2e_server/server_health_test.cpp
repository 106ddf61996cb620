// /health as a load balancer reads it: 503 (never 500, never a hang) while the engine cannot take work, here the only
// replica's worker process killed and being restarted, and 200 once it serves again; every probe answered within
// 1 s meanwhile.
#include "server_harness.hpp"
#include "support/worker_processes.hpp"

#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

using namespace actorllm;
using namespace actorllm::e2e;

TEST_CASE("/health: 503 while the only replica's worker restarts, 200 again once it serves, each within 1 s") {
  server s{{"--distributed-executor-backend", "mp", "--max-worker-restarts", "3"}};
  const std::vector<pid_t> workers = test::worker_pids_of(s.pid());
  REQUIRE(!workers.empty());
  std::mutex mutex;
  std::set<int> seen;
  std::atomic<bool> saw_503{false};
  std::atomic<bool> healthy_again{false};
  std::chrono::duration<double> slowest{0};
  std::atomic<bool> polling{true};
  std::thread poller{[&] {
    while (polling) {
      const auto t0 = steady::now();
      const int status = http(s.port(), "GET", "/health").status;
      const auto took = steady::now() - t0;
      std::lock_guard lock{mutex};
      seen.insert(status);
      slowest = std::max<std::chrono::duration<double>>(slowest, took);
      if (status == 503)
        saw_503 = true;
      else if (status == 200 && saw_503)
        healthy_again = true;
    }
  }};
  REQUIRE(::kill(workers.front(), SIGKILL) == 0);
  const auto deadline = steady::now() + 60s;  // a restart on a busy 2-core machine
  while (!healthy_again && steady::now() < deadline)
    std::this_thread::yield();
  polling = false;
  poller.join();
  CHECK(saw_503.load());
  CHECK(healthy_again.load());
  std::lock_guard lock{mutex};
  for (int status : seen)
    CHECK_MESSAGE((status == 200 || status == 503), "/health answered " << status);
  MESSAGE("slowest /health during the restart: " << slowest.count() << " s");
  CHECK(slowest.count() < 1.0);
  CHECK(http(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4})").status == 200);
}
