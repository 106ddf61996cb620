// Data-parallel serving on a simulated cluster: `serve -dp 2 -tp 2 -pp 2` over two nodes of 4 devices gives the golden
// continuation from both replicas; `--data-parallel-size-local 1` keeps replica 0 in the server's process and puts
// replica 1 on the cluster; and a whole node lost: `serve -dp 2` with the cluster executor over two
// nodes of one device each (a replica per node), the node agent hosting replica 1 killed with SIGKILL under 32
// temperature-0 SSE streams (its worker dies with it). Every stream ends with [DONE] and no error, its text equal to
// the same request run undisturbed, and /health stays 200 throughout (tests/e2e_server/data_parallel_checks.hpp).
// Replica 1 has nowhere to go until a node joins; then its restart places it there and it takes traffic again.
#include "e2e_cluster/cluster_harness.hpp"
#include "e2e_server/data_parallel_checks.hpp"
#include "support/worker_processes.hpp"

#include <doctest/doctest.h>

#include <signal.h>

#include <string>

using namespace actorllm;
using namespace std::chrono_literals;

TEST_CASE("cluster: serve -dp 2 -tp 2 -pp 2 on two nodes of 4 devices: both replicas give the golden continuation") {
  test::sim_cluster cluster{2, 4};
  e2e::server srv{{"-dp", "2", "-tp", "2", "-pp", "2", "--distributed-executor-backend", "cluster", "--cluster-address",
                   cluster.head_address(), "--kv-cache-memory", "4MiB"},
                  {"ACTORLLM_CLUSTER_TOKEN=" + cluster.token()}};
  CHECK(test::worker_pids_of(cluster.process("node-0").pid).size() == 4);  // one replica per node
  CHECK(test::worker_pids_of(cluster.process("node-1").pid).size() == 4);
  e2e::check_golden_on_every_replica(srv.port(), 2);
}

TEST_CASE("cluster: serve -dp 2 --data-parallel-size-local 1: replica 0 in the server's process, replica 1 on a node") {
  test::sim_cluster cluster{1, 1};
  e2e::server srv{{"-dp", "2", "--data-parallel-size-local", "1", "--cluster-address", cluster.head_address(),
                   "--kv-cache-memory", "4MiB"},
                  {"ACTORLLM_CLUSTER_TOKEN=" + cluster.token()}};
  CHECK(test::worker_pids_of(srv.pid()).empty());  // replica 0: threads of the server (uni)
  CHECK(test::worker_pids_of(cluster.process("node-0").pid, "--replica 1").size() == 1);
  CHECK(test::worker_pids_of(cluster.process("node-0").pid, "--replica 0").empty());
  e2e::check_golden_on_every_replica(srv.port(), 2);
  const std::string log = srv.log();
  CHECK_MESSAGE(log.find("replicas 0..0 on this node (uni), replicas 1..1 on the cluster at " +
                         cluster.head_address()) != std::string::npos,
                log);
  CHECK_MESSAGE(log.find("executor uni + cluster,") != std::string::npos, log);  // the Ready line
}

TEST_CASE(
    "cluster: serve -dp 2, kill -9 of replica 1's node agent under 32 greedy SSE streams: all end as undisturbed") {
  test::sim_cluster cluster{2, 1};
  e2e::server srv{{"-dp", "2", "--distributed-executor-backend", "cluster", "--cluster-address", cluster.head_address(),
                   "--max-num-seqs", "8", "--kv-cache-memory", "4MiB", "--max-worker-restarts", "10"},
                  {"ACTORLLM_CLUSTER_TOKEN=" + cluster.token()}};
  const uint16_t port = srv.port();
  // Each node has one device: replica 0 on one, replica 1 on the other.
  std::string host_of_1;
  for (const char* node : {"node-0", "node-1"})
    if (!test::worker_pids_of(cluster.process(node).pid, "--replica 1").empty())
      host_of_1 = node;
  REQUIRE(!host_of_1.empty());

  const auto reference = e2e::undisturbed_stories(port);
  e2e::check_streams_survive(port, reference, [&] { cluster.process(host_of_1).kill(SIGKILL); });
  CHECK(cluster.process(host_of_1).wait_for(2000ms).has_value());

  // Replica 1 cannot be placed (the surviving node's device serves replica 0) until a node joins.
  CHECK(e2e::http(port, "GET", "/health").body.find(R"("degraded":[])") == std::string::npos);
  auto& spare = cluster.start_agent("node-2", 1, cluster.token());
  e2e::check_replica_back(port, reference, 40s);
  CHECK(test::worker_pids_of(spare.pid, "--replica 1").size() == 1);
}
