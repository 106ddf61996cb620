// Data-parallel replicas on the mp executor: two replicas of stories260K built in one actor system through
// actors::build_replica with slots {0, 2} and {1, 2}, tp 2 each, on a node of 4 CPU devices. Each has worker
// processes of its own (named by replica), a rendezvous of its own, its share of the threads, and both give the
// golden greedy ids; stopping one leaves the other serving, and it can be built again beside it.
#include "actorllm/error.hpp"
#include "actors/executors/executor.hpp"
#include "support/golden_ids.hpp"
#include "support/replica_driver.hpp"
#include "support/scoped_env.hpp"
#include "support/test_paths.hpp"
#include "support/worker_processes.hpp"

#include <doctest/doctest.h>

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace actorllm;
using test::scoped_env;

namespace {

/// The command lines of this process's live `actorllm worker` children.
std::vector<std::string> worker_command_lines() {
  std::vector<std::string> out;
  for (auto& w : test::worker_children(::getpid()))
    out.push_back(std::move(w.command_line));
  return out;
}

size_t count_containing(const std::vector<std::string>& lines, const std::string& part) {
  size_t n = 0;
  for (const auto& l : lines)
    n += l.find(part) != std::string::npos ? 1 : 0;
  return n;
}

engine_config dp_config() {
  engine_config c;
  c.model = test::model_dir("stories260K").string();
  c.tensor_parallel_size = 2;
  c.data_parallel_size = 2;
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 2;
  return c;
}

}  // namespace

TEST_CASE("mp executor: dp 2 × tp 2 on 4 CPU devices, built by slot in one actor system, both give the golden ids") {
  const scoped_env devices{"ACTORLLM_CPU_DEVICES", "4"};
  const scoped_env binary{"ACTORLLM_WORKER_BIN", test::actorllm_binary().c_str()};
  engine_config config = dp_config();
  // dp × tp = 4 devices fit this node: mp by default.
  config.distributed_executor_backend = actors::resolve_executor(config);
  REQUIRE(config.distributed_executor_backend == "mp");

  const test::golden_case g = test::greedy_from_bos();
  test::replica_driver driver;
  auto& r0 = driver.build(config, {0, 2});
  auto& r1 = driver.build(config, {1, 2});
  CHECK(r0.executor == "mp");
  CHECK(r0.dp_rank == 0);
  CHECK(r1.dp_rank == 1);
  CHECK(r1.dp_size == 2);
  CHECK(r0.registry != r1.registry);  // a registry (rendezvous store, token) each

  // Four worker processes, two per replica, each named by its replica.
  const auto lines = worker_command_lines();
  CHECK(lines.size() == 4);
  CHECK(count_containing(lines, "--replica 0") == 2);
  CHECK(count_containing(lines, "--replica 1") == 2);

  CHECK(driver.greedy_ids(0, g) == g.output);
  CHECK(driver.greedy_ids(1, g) == g.output);

  // Replica 1 stops (its workers with it) while replica 0 serves; built again, it serves the golden ids too.
  driver.stop(1);
  CHECK(count_containing(worker_command_lines(), "--replica 1") == 0);
  CHECK(driver.greedy_ids(0, g) == g.output);
  driver.build(config, {1, 2});
  CHECK(driver.greedy_ids(2, g) == g.output);
  CHECK(count_containing(worker_command_lines(), "--replica 1") == 2);
}

TEST_CASE("executor rule with replicas: dp × tp × pp devices on this node, or a clear refusal naming the numbers") {
  const scoped_env devices{"ACTORLLM_CPU_DEVICES", "3"};
  engine_config config = dp_config();
  // 2 × 2 = 4 devices on a node of 3: not mp by default (CPU shards share the cores as threads)...
  CHECK(actors::resolve_executor(config) == "uni");
  // ...and a bad data-parallel setting is refused by name.
  config.data_parallel_rank = 2;
  CHECK_THROWS_WITH_AS(actors::resolve_executor(config),
                       doctest::Contains("data_parallel_rank (--data-parallel-rank) must be in [0, data_parallel_size "
                                         "2), got 2"),
                       actorllm::error);
  config.data_parallel_rank = -1;
  config.data_parallel_size_local = 1;
  // Replica 1 runs on a cluster's nodes: without a cluster, refused by name.
  CHECK_THROWS_WITH_AS(actors::resolve_executor(config),
                       doctest::Contains("data_parallel_size_local (--data-parallel-size-local) 1 < data_parallel_size "
                                         "2: replicas 1..1 run on a cluster's nodes, so cluster_address "
                                         "(--cluster-address) must be set"),
                       actorllm::error);
  config.cluster_address = "127.0.0.1:1";  // not contacted: the local replica's executor is chosen by this node
  // One local replica of tp 2: 2 devices, mp fits; replica 1 is the cluster's.
  CHECK(actors::resolve_executor(config) == "mp");
  config.distributed_executor_backend = "mp";
  CHECK_FALSE(actors::runs_on_cluster(config, {0, 2}));
  CHECK(actors::runs_on_cluster(config, {1, 2}));
  config.data_parallel_rank = 1;  // external load balancing: this server runs rank 1 only, here
  CHECK_FALSE(actors::runs_on_cluster(config, {1, 2}));
  config.data_parallel_rank = -1;
  // The cluster executor for every replica contradicts local ones.
  config.distributed_executor_backend = "cluster";
  CHECK_THROWS_WITH_AS(actors::resolve_executor(config), doctest::Contains("leave out one of the two"),
                       actorllm::error);
}
