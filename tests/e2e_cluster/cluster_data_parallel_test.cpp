// Data-parallel replicas on the cluster executor: dp 2 × tp 2 × pp 2 over two simulated nodes of 4 CPU devices,
// each replica built through actors::build_replica with its slot in one actor system. Each replica's ranks go to
// devices the other does not hold (the agents report their workers), both give the golden greedy ids, `actorllm
// status` shows which replica, stage and rank each worker serves, a third replica is refused for want of free
// devices, and replica 1 restarted while replica 0 serves lands on the devices it left.
#include "actors/executors/executor.hpp"
#include "e2e_cluster/cluster_harness.hpp"
#include "support/golden_ids.hpp"
#include "support/replica_driver.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

using namespace actorllm;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// The lines of `status` from node `node_id`'s row up to the next node's row (its worker lines).
std::string node_block(const std::string& status, const std::string& node_id) {
  const auto start = status.find("  " + node_id + " ");
  if (start == std::string::npos)
    return "";
  auto end = status.find("\n  node-", start + 1);
  if (end == std::string::npos)
    end = status.find("\nTotal:", start);
  return status.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

/// Polls `actorllm status` until `done(out)` holds (the head refreshes what agents report once per heartbeat).
template <class Done>
std::string status_when(const test::sim_cluster& cluster, Done done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto r = cluster.status();
    if ((r.status == 0 && done(r.out)) || std::chrono::steady_clock::now() > deadline)
      return r.out;
    std::this_thread::sleep_for(100ms);
  }
}

}  // namespace

TEST_CASE("cluster: dp 2 × tp 2 × pp 2 on two nodes of 4 devices: replicas on distinct devices, golden ids, status") {
  test::sim_cluster cluster{2, 4};
  engine_config config;
  config.model = test::model_dir("stories260K").string();
  config.tensor_parallel_size = 2;
  config.pipeline_parallel_size = 2;
  config.data_parallel_size = 2;
  config.kv_cache_memory = size_t{4} << 20;
  config.distributed_executor_backend = "cluster";
  config.cluster_address = cluster.head_address();
  config.cluster_token = cluster.token();
  REQUIRE(actors::resolve_executor(config) == "cluster");

  const test::golden_case g = test::greedy_from_bos();
  test::replica_driver driver{cluster.token()};
  driver.build(config, {0, 2});
  driver.build(config, {1, 2});
  CHECK(driver.at(0).executor == "cluster");
  CHECK(driver.greedy_ids(0, g) == g.output);
  CHECK(driver.greedy_ids(1, g) == g.output);

  // Replica 0 filled node-0 (both stages: the node had room), so replica 1 went to node-1's free devices.
  const std::string status = status_when(
      cluster, [](const std::string& out) { return contains(out, "Replicas: 2"); }, 10s);
  INFO(status);
  CHECK(contains(status, "Replicas: 2 (replica 0: 4 workers, replica 1: 4 workers)"));
  const std::string node0 = node_block(status, "node-0");
  const std::string node1 = node_block(status, "node-1");
  CHECK(contains(node0, "replica 0 stage 0 rank 0 device 0"));
  CHECK(contains(node0, "replica 0 stage 1 rank 1 device 3"));
  CHECK_FALSE(contains(node0, "replica 1"));
  CHECK(contains(node1, "replica 1 stage 0 rank 0 device 0"));
  CHECK(contains(node1, "replica 1 stage 1 rank 1 device 3"));
  CHECK(contains(status, "Total: 8 device(s) on 2 node(s)"));

  // A third replica finds no free device, and says so.
  try {
    driver.build(config, {2, 3});
    FAIL("a third replica was placed on a full cluster");
  } catch (const actorllm::error& e) {
    CHECK_MESSAGE(contains(e.what(), "replica 2: cannot place tp 2 × pp 2 = 4 devices"), e.what());
    CHECK_MESSAGE(contains(e.what(), "0 free device(s)"), e.what());
  }

  // Replica 1 stops (the replica set does so before a restart) and is built again while replica 0 serves: it lands
  // on node-1 again, the devices replica 0 leaves free.
  driver.stop(1);
  driver.build(config, {1, 2});
  CHECK(driver.greedy_ids(2, g) == g.output);
  CHECK(driver.greedy_ids(0, g) == g.output);
  const std::string again = status_when(
      cluster,
      [](const std::string& out) { return contains(out, "replica 1: 4 workers") && !contains(out, "replica 1: 8"); },
      10s);
  INFO(again);
  CHECK(contains(node_block(again, "node-1"), "replica 1 stage 0 rank 0 device 0"));
  CHECK_FALSE(contains(node_block(again, "node-0"), "replica 1"));
}
