// Data-parallel serving end to end: `serve -dp 2` (in one process) and `serve -dp 2 -tp 2` (mp) give the golden
// continuation from both replicas; `serve -dp 2` (mp: one worker process per replica) under 32 concurrent
// temperature-0 SSE streams, one replica's worker killed with SIGKILL mid-stream. Every stream ends with [DONE] and
// no error, its text equal to the same request run undisturbed; /health stays 200 throughout; the killed replica
// restarts and takes traffic again (tests/e2e_server/data_parallel_checks.hpp).
#include "e2e_server/data_parallel_checks.hpp"
#include "support/worker_processes.hpp"

#include <doctest/doctest.h>

#include <signal.h>

using namespace actorllm;
using namespace std::chrono_literals;

TEST_CASE("serve -dp 2 (the default executor: both replicas in the server's process) gives the golden continuation") {
  e2e::server srv{{"-dp", "2", "--kv-cache-memory", "4MiB"}};
  CHECK(test::worker_pids_of(srv.pid()).empty());
  e2e::check_golden_on_every_replica(srv.port(), 2);
}

TEST_CASE("serve -dp 2 -tp 2 (mp, 4 worker processes): both replicas give the golden continuation") {
  e2e::server srv{{"-dp", "2", "-tp", "2", "--distributed-executor-backend", "mp", "--kv-cache-memory", "4MiB"},
                  {"ACTORLLM_WORKER_BIN=" + test::actorllm_binary().string(), "ACTORLLM_CPU_DEVICES=4"}};
  CHECK(test::worker_pids_of(srv.pid(), "--replica 0").size() == 2);
  CHECK(test::worker_pids_of(srv.pid(), "--replica 1").size() == 2);
  e2e::check_golden_on_every_replica(srv.port(), 2);
}

TEST_CASE("serve -dp 2: kill -9 of one replica's worker under 32 greedy SSE streams: all end as undisturbed") {
  e2e::server srv{
      {"-dp", "2", "--distributed-executor-backend", "mp", "--max-num-seqs", "8", "--kv-cache-memory", "4MiB"},
      {"ACTORLLM_WORKER_BIN=" + test::actorllm_binary().string(), "ACTORLLM_CPU_DEVICES=2"}};
  const uint16_t port = srv.port();
  const auto reference = e2e::undisturbed_stories(port);
  e2e::check_streams_survive(port, reference, [&] {
    const auto victims = test::worker_pids_of(srv.pid(), "--replica 1");
    REQUIRE(victims.size() == 1);
    ::kill(victims.front(), SIGKILL);
  });
  e2e::check_replica_back(port, reference, 30s);
  CHECK(test::worker_pids_of(srv.pid(), "--replica 1").size() == 1);  // a new worker
  CHECK(e2e::metric(port, R"(actorllm:replica_restarts_total{model_name="stories",replica="1"})") == 1);
}
