// A lockstep set of replicas (expert parallelism over data parallelism) built by actors::build_lockstep_replicas
// for a dummy Mixtral: both replicas serve while the other idles; when the set's expert-parallel group is aborted
// (what the replica set does once one replica failed) the request that runs fails at once, naming the group,
// instead of waiting for a partner that is gone; the set stops promptly; and a fresh set serves again.
#include "actors/executors/lockstep_replicas.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "actors/executors/executor.hpp"
#include "support/test_paths.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

using namespace actorllm;

namespace {

struct mixtral_dir {
  mixtral_dir() : path{test::make_temp_dir("actorllm-lockstep")} {
    std::ofstream f{path / "config.json"};
    f << R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64, "intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
        "max_position_embeddings": 512, "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": null,
        "torch_dtype": "float32"})";
  }
  ~mixtral_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
};

engine_config lockstep_config(const mixtral_dir& dir) {
  engine_config c;
  c.model = dir.path.string();
  c.load_format = "dummy";
  c.seed = 5;
  c.enable_expert_parallel = true;
  c.data_parallel_size = 2;
  c.tensor_parallel_size = 2;
  c.distributed_executor_backend = "uni";
  c.device = "cpu";
  c.kv_cache_memory = size_t{4} << 20;
  c.threads = 2;
  c.step_timeout = 60;
  return c;
}

struct outcome {
  std::vector<int32_t> ids;
  std::string failure;
};

/// Submits a greedy request to `engine` and collects its news; `on_first_token` runs once the first token is in.
template <class F>
outcome run_request(caf::actor_system& sys, const proto::engine_actor& engine, uint64_t id, int32_t max_tokens,
                    F on_first_token) {
  caf::scoped_actor self{sys};
  proto::submit_request req;
  req.request_id = id;
  req.prompt_is_tokens = true;
  req.prompt_ids = {5, 17, 3, 88, 41, 9};
  req.params.temperature = 0;
  req.params.max_tokens = max_tokens;
  req.params.ignore_eos = true;
  req.stream = true;
  req.sink = caf::actor_cast<proto::output_sink>(self);
  caf::anon_send(engine, std::move(req));
  outcome out;
  bool done = false, first = true;
  while (!done) {
    bool timed_out = false;
    self->receive(
        [&](proto::output_batch& batch) {
          if (first && !batch.deltas.empty()) {
            first = false;
            on_first_token();
          }
          for (auto& f : batch.failures) {
            out.failure = f.message;
            done = true;
          }
          for (auto& o : batch.outputs)
            if (o.finished && !o.outputs.empty()) {
              out.ids = o.outputs.front().token_ids;
              done = true;
            }
        },
        caf::after(std::chrono::seconds{30}) >> [&] { timed_out = true; });
    REQUIRE_MESSAGE(!timed_out, "no news of request " << id << " within 30 s");
  }
  return out;
}

}  // namespace

TEST_CASE("a lockstep set: each replica serves while the other idles, an aborted group fails the running request") {
  mixtral_dir dir;
  const engine_config c = lockstep_config(dir);
  REQUIRE(actors::steps_in_lockstep(c));
  caf::actor_system_config cfg;
  proto::add_message_types(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};

  actors::lockstep_set set = actors::build_lockstep_replicas(sys, c, 2);
  REQUIRE(set.replicas.size() == 2);
  CHECK(set.expert_group->size() == 4);
  const outcome on0 = run_request(sys, set.replicas[0].engine, 1, 24, [] {});
  const outcome on1 = run_request(sys, set.replicas[1].engine, 2, 24, [] {});
  REQUIRE(on0.failure.empty());
  REQUIRE(on1.failure.empty());
  CHECK(on0.ids.size() == 24);
  CHECK(on1.ids == on0.ids);

  // A long request on replica 0; once it streams, the group is aborted as when replica 1 is lost.
  const auto t0 = std::chrono::steady_clock::now();
  const outcome cut =
      run_request(sys, set.replicas[0].engine, 3, 400, [&] { set.expert_group->abort("replica 1 failed"); });
  CHECK(cut.ids.empty());
  INFO(cut.failure);
  CHECK(cut.failure.find("the expert-parallel group was aborted: replica 1 failed") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds{20});

  const auto t1 = std::chrono::steady_clock::now();
  actors::stop_lockstep_set(sys, set, "the test is over", /*failed=*/false);
  CHECK(set.replicas.empty());
  CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds{10});

  // What the replica set's restart does: a fresh set over a fresh group serves the same ids.
  actors::lockstep_set fresh = actors::build_lockstep_replicas(sys, c, 2);
  CHECK(run_request(sys, fresh.replicas[1].engine, 4, 24, [] {}).ids == on0.ids);
  actors::stop_lockstep_set(sys, fresh, "the test is over", /*failed=*/false);
}

TEST_CASE("lockstep: only an MoE model with expert parallelism and more than one replica steps in lockstep") {
  mixtral_dir dir;
  engine_config c = lockstep_config(dir);
  CHECK(actors::steps_in_lockstep(c));
  c.enable_expert_parallel = false;
  CHECK_FALSE(actors::steps_in_lockstep(c));
  c.enable_expert_parallel = true;
  c.data_parallel_size = 1;
  CHECK_FALSE(actors::steps_in_lockstep(c));
  c.data_parallel_size = 2;
  // Worker processes, on one node or on a cluster's: their EP group meets through the set's store.
  c.distributed_executor_backend = "mp";
  CHECK(actors::steps_in_lockstep(c));
  c.distributed_executor_backend = "cluster";
  CHECK(actors::steps_in_lockstep(c));
  c.distributed_executor_backend = "ray";
  CHECK_THROWS_WITH_AS(actors::steps_in_lockstep(c), doctest::Contains("not distributed_executor_backend 'ray'"),
                       actorllm::error);
  c.distributed_executor_backend = "uni";
  c.data_parallel_size_local = 1;  // replica 1 on another node, which an in-process group cannot reach
  CHECK_THROWS_WITH_AS(actors::steps_in_lockstep(c), doctest::Contains("data_parallel_size_local 1"), actorllm::error);
  c.distributed_executor_backend = "mp";
  CHECK(actors::steps_in_lockstep(c));
  c.data_parallel_size_local = 0;
  c.pipeline_parallel_size = 2;
  CHECK_THROWS_WITH_AS(actors::steps_in_lockstep(c), doctest::Contains("not pipeline_parallel_size 2"),
                       actorllm::error);
  c.pipeline_parallel_size = 1;
  c.model = (dir.path / "missing").string();
  CHECK_FALSE(actors::steps_in_lockstep(c));  // building the replica says what is wrong with it
}

TEST_CASE("left to choose, the executor is uni for lockstep DP+EP even where a node has a device per rank") {
  mixtral_dir dir;
  engine_config c = lockstep_config(dir);
  c.distributed_executor_backend.clear();
  ::setenv("ACTORLLM_CPU_DEVICES", "4", 1);  // dp 2 x tp 2 would get a worker process per rank: mp
  CHECK(actors::resolve_executor(c) == "uni");
  c.enable_expert_parallel = false;
  CHECK(actors::resolve_executor(c) == "mp");
  ::unsetenv("ACTORLLM_CPU_DEVICES");
}

TEST_CASE("a lockstep set: one shard failing alone fails the other replica's running step at once") {
  // TP rank 1 of replica 1 gets a plan no other shard gets, whose block table points outside its cache: it fails
  // alone. Replica 1's rank 0 would then wait for it in the next idle step, and replica 0's step for both, until the
  // step timeout (60 s here); the failing shard aborts the groups instead, so the request fails within seconds.
  mixtral_dir dir;
  const engine_config c = lockstep_config(dir);
  caf::actor_system_config cfg;
  proto::add_message_types(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  actors::lockstep_set set = actors::build_lockstep_replicas(sys, c, 2);
  REQUIRE(set.replicas[1].shards.size() == 2);

  proto::step_plan bad;
  bad.step_id = 9999;
  bad.tokens = {1};
  bad.positions = {0};
  bad.sequences.push_back({engine::seq_id{777, 0}, 0, 1, true, {1 << 30}});
  caf::anon_send(set.replicas[1].shards[1], proto::shared_plan{std::make_shared<const proto::step_plan>(bad)});

  const auto t0 = std::chrono::steady_clock::now();
  const outcome cut = run_request(sys, set.replicas[0].engine, 1, 200, [] {});
  INFO(cut.failure);
  CHECK(cut.ids.empty());
  CHECK(cut.failure.find("was aborted: replica 1 stage 0 rank 1") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds{20});
  actors::stop_lockstep_set(sys, set, "the test is over", /*failed=*/true);
}
