// The executor rule (docs/DESIGN.md §4): one test per branch of the default and of each request, and the names
// --distributed-executor-backend takes.
#include "actors/executors/executor_choice.hpp"

#include <doctest/doctest.h>

using namespace actorllm;
using actors::executor_backend;
using actors::executor_inputs;

namespace {

actors::executor_decision decision(const actors::executor_choice& c) {
  if (auto* err = std::get_if<std::string>(&c))
    FAIL("unexpected error: " << *err);
  return std::get<actors::executor_decision>(c);
}

std::string error_of(const actors::executor_choice& c) {
  auto* err = std::get_if<std::string>(&c);
  return err ? *err : std::string{"(no error)"};
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

executor_inputs gpu_node(int32_t world, int32_t devices) {
  executor_inputs in;
  in.world_size = world;
  in.local_devices = devices;
  in.gpu = true;
  return in;
}

executor_inputs cpu_node(int32_t world, int32_t devices) {
  executor_inputs in = gpu_node(world, devices);
  in.gpu = false;
  return in;
}

executor_inputs with_cluster(executor_inputs in, int32_t cluster_devices) {
  in.cluster_configured = true;
  in.cluster_devices = cluster_devices;
  return in;
}

executor_inputs requesting(executor_inputs in, executor_backend backend) {
  in.requested = backend;
  return in;
}

}  // namespace

TEST_CASE("backend names: uni, mp and cluster parse and print, ray and others do not") {
  for (auto b : {executor_backend::uni, executor_backend::mp, executor_backend::cluster})
    CHECK(actors::parse_executor_backend(actors::to_string(b)) == b);
  CHECK(actors::to_string(executor_backend::mp) == "mp");
  CHECK_FALSE(actors::parse_executor_backend("ray"));
  CHECK_FALSE(actors::parse_executor_backend("Uni"));
  CHECK_FALSE(actors::parse_executor_backend(""));

  const std::string ray = actors::executor_backend_error("ray");
  CHECK_MESSAGE(contains(ray, "ray is not needed: use cluster"), ray);
  CHECK_MESSAGE(contains(ray, "uni, mp, cluster"), ray);
  const std::string other = actors::executor_backend_error("threads");
  CHECK_MESSAGE(contains(other, "'threads'"), other);
  CHECK_MESSAGE(contains(other, "uni, mp, cluster"), other);
}

TEST_CASE("default: world size 1 runs uni, even with a cluster and many devices") {
  CHECK(decision(actors::choose_executor(gpu_node(1, 0))).backend == executor_backend::uni);
  CHECK(decision(actors::choose_executor(with_cluster(gpu_node(1, 8), 16))).backend == executor_backend::uni);
}

TEST_CASE("default: a world that fits this node's devices runs mp, on GPU and on CPU") {
  auto d = decision(actors::choose_executor(with_cluster(gpu_node(4, 4), 16)));
  CHECK(d.backend == executor_backend::mp);
  CHECK_MESSAGE(contains(d.reason, "4 GPU device(s)"), d.reason);
  CHECK(decision(actors::choose_executor(cpu_node(2, 4))).backend == executor_backend::mp);
}

TEST_CASE("default: a world larger than this node runs on the configured cluster") {
  auto d = decision(actors::choose_executor(with_cluster(gpu_node(8, 4), 8)));
  CHECK(d.backend == executor_backend::cluster);
  CHECK(d.reason == "world size 8 is more than this node's 4 device(s); the cluster has 8 devices for it");
  CHECK(decision(actors::choose_executor(with_cluster(cpu_node(4, 1), 4))).backend == executor_backend::cluster);
}

TEST_CASE("default: a configured cluster with too few devices is an error listing the numbers") {
  const std::string err = error_of(actors::choose_executor(with_cluster(gpu_node(8, 2), 6)));
  CHECK_MESSAGE(contains(err, "= 8 needs 8 devices"), err);
  CHECK_MESSAGE(contains(err, "the cluster has 6"), err);
  CHECK_MESSAGE(contains(err, "this node 2"), err);
}

TEST_CASE("default: on CPU without a cluster the shards run as threads (uni), saying how to get processes") {
  auto d = decision(actors::choose_executor(cpu_node(4, 1)));
  CHECK(d.backend == executor_backend::uni);
  CHECK(d.reason ==
        "shards run as threads of this process: this node has 1 CPU device(s) for a world of 4; give --cpu-devices or "
        "a cluster for processes");
}

TEST_CASE("default: on GPU without a cluster a world larger than this node is an error") {
  const std::string err = error_of(actors::choose_executor(gpu_node(4, 2)));
  CHECK_MESSAGE(contains(err,
                         "tensor_parallel_size × pipeline_parallel_size = 4 needs 4 devices; this node has 2 and "
                         "no cluster is configured"),
                err);
  CHECK_MESSAGE(contains(err, "--cluster-address HEAD:PORT"), err);
}

TEST_CASE("requested uni is taken, and on GPU with more shards than devices the reason warns") {
  auto d = decision(actors::choose_executor(requesting(gpu_node(4, 8), executor_backend::uni)));
  CHECK(d.backend == executor_backend::uni);
  CHECK_FALSE(contains(d.reason, "warning"));
  CHECK(decision(actors::choose_executor(requesting(cpu_node(4, 1), executor_backend::uni))).backend ==
        executor_backend::uni);

  auto shared = decision(actors::choose_executor(requesting(gpu_node(4, 1), executor_backend::uni)));
  CHECK(shared.backend == executor_backend::uni);
  CHECK_MESSAGE(contains(shared.reason, "warning: 4 shards share this node's 1 GPU(s)"), shared.reason);
}

TEST_CASE("requested mp is taken when this node has the devices, and on CPU even when it has not") {
  CHECK(decision(actors::choose_executor(requesting(gpu_node(2, 2), executor_backend::mp))).backend ==
        executor_backend::mp);
  CHECK(decision(actors::choose_executor(requesting(gpu_node(1, 1), executor_backend::mp))).backend ==
        executor_backend::mp);
  auto d = decision(actors::choose_executor(requesting(cpu_node(4, 1), executor_backend::mp)));
  CHECK(d.backend == executor_backend::mp);
  CHECK_MESSAGE(contains(d.reason, "4 worker processes share this node's 1 CPU device(s)"), d.reason);
}

TEST_CASE("requested mp on GPU with more shards than devices is refused, naming both numbers") {
  const std::string err =
      error_of(actors::choose_executor(with_cluster(requesting(gpu_node(4, 2), executor_backend::mp), 8)));
  CHECK_MESSAGE(contains(err, "world size 4 needs 4 GPUs and this node has 2"), err);
}

TEST_CASE("requested cluster is taken when one is configured with the devices, even for a world that fits here") {
  auto d = decision(actors::choose_executor(with_cluster(requesting(gpu_node(2, 8), executor_backend::cluster), 2)));
  CHECK(d.backend == executor_backend::cluster);
  CHECK(d.reason == "cluster requested for world size 2; the cluster has 2 devices for it");
}

TEST_CASE("requested cluster without one configured is refused, saying how to configure one") {
  const std::string err = error_of(actors::choose_executor(requesting(gpu_node(8, 4), executor_backend::cluster)));
  CHECK_MESSAGE(contains(err, "none is configured"), err);
  CHECK_MESSAGE(contains(err, "--cluster-address HEAD:PORT"), err);
  CHECK_MESSAGE(contains(err, "[cluster]"), err);
}

TEST_CASE("requested cluster with too few devices is refused with the numbers") {
  const std::string err =
      error_of(actors::choose_executor(with_cluster(requesting(gpu_node(8, 4), executor_backend::cluster), 4)));
  CHECK_MESSAGE(contains(err, "needs 8 devices; the cluster has 4"), err);
}

TEST_CASE("a world size below 1 or a negative device count is an error") {
  CHECK(contains(error_of(actors::choose_executor(gpu_node(0, 4))), "at least 1, got 0"));
  CHECK(contains(error_of(actors::choose_executor(gpu_node(2, -1))), "cannot be negative"));
}

TEST_CASE("data-parallel replicas: the devices compared with this node's are dp × tp × pp") {
  executor_inputs two = cpu_node(2, 4);
  two.replicas = 2;
  CHECK(actors::devices_needed(two) == 4);
  auto d = decision(actors::choose_executor(two));
  CHECK(d.backend == executor_backend::mp);
  CHECK_MESSAGE(contains(d.reason, "dp 2 × world size 2 = 4 fits this node's 4 CPU device(s)"), d.reason);

  // dp 2 × tp 2 on 2 GPUs: too few for mp; no cluster: an error naming every number.
  executor_inputs gpus = gpu_node(2, 2);
  gpus.replicas = 2;
  const std::string err = error_of(actors::choose_executor(gpus));
  CHECK_MESSAGE(
      contains(err, "data_parallel_size 2 × tensor_parallel_size × pipeline_parallel_size 2 = 4 needs 4 devices"), err);
  CHECK_MESSAGE(contains(err, "this node has 2"), err);
  const std::string mp = error_of(actors::choose_executor(requesting(gpus, executor_backend::mp)));
  CHECK_MESSAGE(contains(mp, "dp 2 × world size 2 = 4 needs 4 GPUs and this node has 2"), mp);
  // A cluster with the devices takes them.
  auto c = decision(actors::choose_executor(with_cluster(gpus, 8)));
  CHECK(c.backend == executor_backend::cluster);
}

TEST_CASE("data-parallel replicas of one shard: uni while the node has a device for each, else refused on GPUs") {
  executor_inputs one = gpu_node(1, 2);
  one.replicas = 2;
  auto d = decision(actors::choose_executor(one));
  CHECK(d.backend == executor_backend::uni);
  CHECK_MESSAGE(contains(d.reason, "each of the 2 replicas' one shard runs in this process"), d.reason);
  one.replicas = 3;
  CHECK(contains(error_of(actors::choose_executor(one)), "= 3 needs 3 devices; this node has 2"));
  // On CPU devices shards can share the cores: uni threads.
  executor_inputs cpu = cpu_node(1, 1);
  cpu.replicas = 2;
  CHECK(decision(actors::choose_executor(cpu)).backend == executor_backend::uni);
  cpu.replicas = 0;
  CHECK(contains(error_of(actors::choose_executor(cpu)), "data_parallel_size must be at least 1, got 0"));
}
