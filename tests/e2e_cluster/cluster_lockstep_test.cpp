// Lockstep DP+EP on the cluster executor: dp 2 replicas × tp 2 ranks over two simulated nodes of 2 CPU devices. Each
// replica's TP group stays on one node, so the expert-parallel group of 4 spans both nodes and meets through the
// engine's expert store; its collectives go over Gloo, as between real hosts (the simulated nodes share this machine,
// whose shared memory is turned off for them); the schedulers keep step over CAF messages. A random-weight Qwen3-MoE
// checkpoint (uneven expert placement: 6 experts over 4 ranks) gives the float64 reference's greedy ids with one
// replica busy and the other idle, and with both busy, and with EPLB moving experts between the nodes.
#include "actorllm/llm.hpp"
#include "e2e_cluster/cluster_harness.hpp"
#include "model/model_config.hpp"
#include "model_test_util.hpp"
#include "moe_model_json.hpp"
#include "reference_llama.hpp"
#include "support/test_paths.hpp"
#include "support/worker_processes.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;

namespace {

/// dp 2 × tp 2 with expert parallelism on `cluster`, over the checkpoint in `dir`.
engine_config lockstep_config(const test::sim_cluster& cluster, const std::filesystem::path& dir) {
  engine_config c;
  c.model = dir.string();
  c.tensor_parallel_size = 2;
  c.data_parallel_size = 2;
  c.enable_expert_parallel = true;
  c.kv_cache_memory = size_t{4} << 20;
  c.distributed_executor_backend = "cluster";
  c.cluster_address = cluster.head_address();
  c.cluster_token = cluster.token();
  return c;
}

}  // namespace

TEST_CASE("cluster: lockstep dp 2 x tp 2 over 2 simulated nodes gives the float64 reference's ids, busy or idle") {
  const std::string json = model::test_util::qwen3_moe_json();
  const model::model_config cfg = model::parse_model_config(json, "config.json");
  const model::model_weights w = model::test_util::random_weights(cfg, 31, dtype::f32);
  const auto dir = test::make_temp_dir("actorllm-cluster-lockstep");
  model::test_util::write_checkpoint(dir, json, w);
  const std::vector<int32_t> first{3, 14, 15, 92, 65, 35, 89, 79};
  const std::vector<int32_t> second{27, 18, 28, 18, 28, 45};
  constexpr int32_t n = 20;
  const auto want_first = model::test_util::reference_greedy(cfg, w, first, n);
  const auto want_second = model::test_util::reference_greedy(cfg, w, second, n);
  CHECK(std::set<int32_t>(want_first.begin(), want_first.end()).size() >= 6);
  ::setenv("ACTORLLM_SHM_COLLECTIVE", "0", 1);  // the agents and their workers inherit it
  {
    test::sim_cluster cluster{2, 2};
    engine_config c = lockstep_config(cluster, dir);
    LLM llm{c};
    CHECK(llm.info().executor == "cluster");
    CHECK(test::worker_pids_of(cluster.process("node-0").pid).size() == 2);  // one replica per node
    CHECK(test::worker_pids_of(cluster.process("node-1").pid).size() == 2);
    sampling_params p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = n;
    CHECK(llm.generate(prompt{first}, p).outputs.at(0).token_ids == want_first);  // the other replica idles
    const auto both =
        llm.generate(std::vector<prompt>{prompt{first}, prompt{second}, prompt{second}, prompt{first}}, p);
    CHECK(both.at(0).outputs.at(0).token_ids == want_first);
    CHECK(both.at(1).outputs.at(0).token_ids == want_second);
    CHECK(both.at(2).outputs.at(0).token_ids == want_second);
    CHECK(both.at(3).outputs.at(0).token_ids == want_first);
    const auto stats = llm.stats();
    REQUIRE(stats.replicas.size() == 2);
    CHECK(stats.replicas[0].routed_requests > 0);
    CHECK(stats.replicas[1].routed_requests > 0);
  }
  {
    // EPLB between the nodes: 8 expert slots (2 redundant), 2 per rank, moved every 4 steps over Gloo.
    test::sim_cluster cluster{2, 2};
    engine_config c = lockstep_config(cluster, dir);
    c.enable_eplb = true;
    c.eplb = eplb_config{6, 4, 2, true};
    LLM llm{c};
    sampling_params p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = n;
    const auto both = llm.generate(std::vector<prompt>{prompt{first}, prompt{second}}, p);
    CHECK(both.at(0).outputs.at(0).token_ids == want_first);
    CHECK(both.at(1).outputs.at(0).token_ids == want_second);
    CHECK(llm.stats().eplb.rearrangements >= 4);
  }
  ::unsetenv("ACTORLLM_SHM_COLLECTIVE");
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "cluster: a lockstep set whose second replica cannot be placed fails at once, naming why, with no worker left") {
  // One node of 2 devices: one replica's ranks load and wait in the EP group for the other's, which cannot be placed.
  // The set's store goes away with the failure, so replica 0 stops waiting at once instead of at the rendezvous
  // timeout.
  const std::string json = model::test_util::mixtral_json();
  const model::model_config cfg = model::parse_model_config(json, "config.json");
  const auto dir = test::make_temp_dir("actorllm-cluster-lockstep-fail");
  model::test_util::write_checkpoint(dir, json, model::test_util::random_weights(cfg, 5, dtype::f32));
  test::sim_cluster cluster{1, 2};
  engine_config c = lockstep_config(cluster, dir);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    LLM llm{c};
    FAIL("a set of 4 ranks started on 2 devices");
  } catch (const error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("cannot place tp 2 × pp 1 = 2 devices") != std::string::npos);  // whichever replica came second
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds{20});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  while (!test::worker_pids_of(cluster.process("node-0").pid).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
  CHECK(test::worker_pids_of(cluster.process("node-0").pid).empty());
  std::filesystem::remove_all(dir);
}
