// Building a replica over worker processes: see worker_replica.hpp.
#include "actors/executors/worker_replica.hpp"

#include "actorllm/error.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/cluster/worker_registry.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>

#include <chrono>
#include <random>

namespace actorllm::actors {
namespace {

std::string random_token() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
}

constexpr auto registration_timeout = std::chrono::seconds{60};

}  // namespace

worker_set launch_workers(caf::actor_system& sys, worker_launcher& launcher, int32_t world,
                          const std::string& registry_host) {
  worker_set out;
  out.token = random_token();
  caf::scoped_actor self{sys};
  out.registry = spawn_worker_registry(sys, {out.token, world, caf::actor_cast<caf::actor>(self)});
  auto port = publish_control(out.registry, 0, registry_host);
  if (!port) {
    caf::anon_send_exit(out.registry, caf::exit_reason::user_shutdown);
    throw actorllm::error{errc::load_failed,
                          fmt::format("cannot listen for workers on {}: {}", registry_host, sys.render(port.error()))};
  }
  out.port = *port;
  log::info("executor", "workers register with this engine at {}:{}", registry_host, out.port);
  auto fail = [&](std::string message) {
    launcher.stop_all();
    caf::anon_send_exit(out.registry, caf::exit_reason::user_shutdown);
    throw actorllm::error{errc::load_failed, std::move(message)};
  };
  for (int32_t i = 0; i < world; ++i) {
    try {
      launcher.start(i, registry_host, out.port, out.token);
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }
  out.workers.resize(static_cast<size_t>(world));
  int32_t registered = 0;
  const auto deadline = std::chrono::steady_clock::now() + registration_timeout;
  while (registered < world) {
    bool timed_out = false;
    self->receive(
        [&](proto::worker_hello& hello) {
          out.workers[static_cast<size_t>(hello.index)] = hello.worker;
          ++registered;
        },
        caf::after(std::chrono::milliseconds{100}) >> [&] { timed_out = true; });
    if (!timed_out)
      continue;
    if (auto dead = launcher.dead_worker())
      fail(*dead + " before registering; its log is above");
    if (std::chrono::steady_clock::now() > deadline)
      fail(
          fmt::format("only {} of {} workers registered within {} s", registered, world, registration_timeout.count()));
  }
  return out;
}

replica build_worker_replica(caf::actor_system& sys, const engine_config& config, replica_plan plan,
                             std::shared_ptr<worker_launcher> launcher, const std::string& registry_host) {
  replica& r = plan.r;
  const int32_t tp = config.tensor_parallel_size;
  const int32_t pp = config.pipeline_parallel_size;
  const int32_t pcp = std::max(1, config.prefill_context_parallel_size);
  const int32_t per_stage = tp * pcp;  // the stage's group: pcp copies of its TP group, copy-major
  const int32_t world = per_stage * pp;
  const std::string who = replica_prefix(r.dp_rank, r.dp_size);
  log::info("executor", "{}{}: {} stage(s) x {} tp rank(s) of {} (layers per stage: {}) in {} worker process(es)", who,
            launcher->name(), pp, tp, config.model, describe_stages(r.stages), world);

  // 1. Start the workers and wait until each has registered (or died trying).
  worker_set ws = launch_workers(sys, *launcher, world, registry_host);
  r.registry = ws.registry;
  r.workers = ws.workers;
  const std::string& token = ws.token;
  caf::scoped_actor self{sys};
  auto fail = [&](std::string message) {
    launcher->stop_all();
    caf::anon_send_exit(r.registry, caf::exit_reason::user_shutdown);
    r.registry = nullptr;
    throw actorllm::error{errc::load_failed, std::move(message)};
  };

  // 2. One shard per worker, last stage first so that each one is spawned knowing its successor. Each replica
  // generation has its own registry (store) and token; the replica in the prefix keeps keys apart all the same.
  const std::string prefix = fmt::format("dp{}-gen-{}", r.dp_rank, token.substr(0, 8));
  r.shards.resize(static_cast<size_t>(world));
  for (int32_t s = pp - 1; s >= 0; --s) {
    for (int32_t in_stage = 0; in_stage < per_stage; ++in_stage) {
      const auto index = static_cast<size_t>(s * per_stage + in_stage);
      proto::shard_assignment a = make_shard_assignment(config, plan, s, in_stage);
      a.n_threads = launcher->threads_for(static_cast<int32_t>(index), plan.threads_per_shard);
      a.device_offset = launcher->device_offset(plan.share.device_offset);
      if (s + 1 < pp)
        a.next = r.shards[static_cast<size_t>((s + 1) * per_stage + in_stage)];
      a.data_plane_host = "";  // each worker binds its own node's address (ACTORLLM_HOST_IP)
      a.rendezvous_prefix = prefix;
      std::optional<std::string> error;
      self->request(r.workers[index], std::chrono::seconds{30}, proto::spawn_shard_atom::value, a)
          .receive([&](proto::shard_actor& shard) { r.shards[index] = std::move(shard); },
                   [&](caf::error& err) { error = sys.render(err); });
      if (error)
        fail(fmt::format("{}worker {} could not host stage {} rank {}: {}", who, index, s, a.tp_rank, *error));
    }
  }

  // 3. Load, size the cache, and start the scheduler and the engine, as in-process.
  r.processes = launcher->local_processes();
  r.release_workers = [launcher] { launcher->stop_all(); };
  try {
    finish_replica(sys, config, plan);
  } catch (...) {
    launcher->stop_all();
    throw;
  }
  return std::move(plan.r);
}

}  // namespace actorllm::actors
