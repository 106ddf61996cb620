// A worker process checks the device of each shard it is assigned against its own build (another node's binary
// may lack a backend the engine has): an unusable device is refused with resolve_device's message, naming it, and
// the worker keeps serving. Run by CAF's deterministic test coordinator.
#include "actorllm/proto/error.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "actors/runtime/shard_actor.hpp"
#include "actors/runtime/worker_actor.hpp"
#include "deterministic_system.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>

#include "kernels/device.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>

using namespace actorllm;

namespace {

struct worker_fixture : test::deterministic_system {
  proto::worker_actor worker = actors::spawn_worker(sys, proto::worker_registry_actor{}, 0);

  ~worker_fixture() {
    caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
    sched.run();
  }

  static proto::shard_assignment assignment(std::string device) {
    proto::shard_assignment a;
    a.model_dir = "/models/unused";  // nothing is loaded: the shard is refused, or spawned and never asked to load
    a.layer_end = 1;
    a.device = std::move(device);
    return a;
  }

  /// The worker's answer to spawn_shard: the error's message, or nullopt when it spawned a shard.
  std::optional<std::string> spawn(const proto::shard_assignment& a) {
    auto pending = self->request(worker, caf::infinite, proto::spawn_shard_atom::value, a);
    sched.run();
    std::optional<std::string> refused;
    pending.receive(
        [&](proto::shard_actor& shard) {
          REQUIRE(shard);
          caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
        },
        [&](caf::error& err) {
          CHECK(proto::code_of(err) == errc::invalid_config);
          refused = proto::message_of(err);
        });
    return refused;
  }
};

}  // namespace

TEST_CASE("make_worker_shard_args maps the assignment's device and throws for one this build cannot run") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  CHECK(actors::make_worker_shard_args(sys, worker_fixture::assignment("cpu"), {}).device == device_kind::cpu);
  if (visible_gpu_count() == 0)  // no CUDA backend in the build, or no GPU for it
    CHECK_THROWS_WITH_AS(actors::make_worker_shard_args(sys, worker_fixture::assignment("cuda"), {}),
                         doctest::Contains("--device cuda: no"), error);
  CHECK_THROWS_WITH_AS(actors::make_worker_shard_args(sys, worker_fixture::assignment("tpu"), {}),
                       doctest::Contains("--device 'tpu' is not a device"), error);
}

TEST_CASE_FIXTURE(worker_fixture, "a worker refuses a shard on a device it cannot run, naming it, and keeps serving") {
  if (visible_gpu_count() == 0) {
    auto cuda = spawn(assignment("cuda"));
    REQUIRE(cuda.has_value());
    CHECK(cuda->find("--device cuda: no") != std::string::npos);
  }
  auto tpu = spawn(assignment("tpu"));
  REQUIRE(tpu.has_value());
  CHECK(tpu->find("'tpu' is not a device") != std::string::npos);
  CHECK_FALSE(spawn(assignment("cpu")).has_value());
}
