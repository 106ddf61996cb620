// The mp executor: worker processes on this node, each hosting one shard.
#include "actors/mp_executor.hpp"

#include "actorllm/error.hpp"
#include "actorllm/proto/error.hpp"
#include "actors/worker_registry.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <random>

namespace actorllm::actors {
namespace {

[[noreturn]] void throw_failure(std::string message) { throw actorllm::error{errc::load_failed, std::move(message)}; }

std::string random_token() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
}

constexpr auto registration_timeout = std::chrono::seconds{60};

}  // namespace

std::string worker_binary() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("ACTORLLM_WORKER_BIN"); env != nullptr && *env != '\0') {
    if (!fs::exists(env))
      throw actorllm::error{errc::invalid_config, fmt::format("ACTORLLM_WORKER_BIN={} does not exist", env)};
    return env;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && self.filename() == "actorllm")
    return self.string();
  if (!ec && fs::exists(self.parent_path() / "actorllm"))
    return (self.parent_path() / "actorllm").string();
  throw actorllm::error{errc::invalid_config,
                        "the mp executor runs shards in `actorllm worker` processes, but no actorllm binary was found "
                        "beside this program: set ACTORLLM_WORKER_BIN"};
}

std::string data_plane_host() {
  const char* env = std::getenv("ACTORLLM_HOST_IP");
  return env != nullptr && *env != '\0' ? std::string{env} : std::string{"127.0.0.1"};
}

replica build_mp_replica(caf::actor_system& sys, const engine_config& config) {
  replica_plan plan = plan_replica(config);
  replica& r = plan.r;
  r.executor = "mp";
  const int32_t tp = config.tensor_parallel_size;
  const int32_t pp = config.pipeline_parallel_size;
  const int32_t world = tp * pp;
  const std::string program = worker_binary();
  const std::string host = data_plane_host();
  const std::string token = random_token();

  caf::scoped_actor self{sys};
  r.registry = spawn_worker_registry(sys, {token, world, caf::actor_cast<caf::actor>(self)});
  auto port = sys.middleman().publish(r.registry, 0, host.c_str(), true);
  if (!port) {
    caf::anon_send_exit(r.registry, caf::exit_reason::user_shutdown);
    throw_failure(fmt::format("cannot listen for workers on {}: {}", host, sys.render(port.error())));
  }
  log::info("executor",
            "mp executor: {} stage(s) x {} tp rank(s) of {} (layers per stage: {}) in {} worker process(es), {} "
            "kernel thread(s) each; workers register at {}:{}",
            pp, tp, config.model, describe_stages(r.stages), world, plan.threads_per_shard, host, *port);

  auto fail = [&](std::string message) {
    for (auto& p : r.processes)
      p->kill(SIGKILL);
    r.processes.clear();
    caf::anon_send_exit(r.registry, caf::exit_reason::user_shutdown);
    r.registry = nullptr;
    throw_failure(std::move(message));
  };

  // 1. Start the workers and wait until each has registered (or died trying).
  for (int32_t i = 0; i < world; ++i) {
    util::child_process::options o;
    o.program = program;
    o.args = {"worker", "--registry", fmt::format("{}:{}", host, *port), "--index", std::to_string(i)};
    o.env = {{"ACTORLLM_WORKER_TOKEN", token}};
    try {
      r.processes.push_back(std::make_shared<util::child_process>(o));
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }
  r.workers.resize(static_cast<size_t>(world));
  int32_t registered = 0;
  const auto deadline = std::chrono::steady_clock::now() + registration_timeout;
  while (registered < world) {
    bool timed_out = false;
    self->receive(
        [&](proto::worker_hello& hello) {
          r.workers[static_cast<size_t>(hello.index)] = hello.worker;
          ++registered;
        },
        caf::after(std::chrono::milliseconds{100}) >> [&] { timed_out = true; });
    if (!timed_out)
      continue;
    for (int32_t i = 0; i < world; ++i)
      if (auto status = r.processes[static_cast<size_t>(i)]->exit_status())
        fail(fmt::format("worker {} (pid {}) exited with status {} before registering; its log is above", i,
                         r.processes[static_cast<size_t>(i)]->pid(), *status));
    if (std::chrono::steady_clock::now() > deadline)
      fail(
          fmt::format("only {} of {} workers registered within {} s", registered, world, registration_timeout.count()));
  }

  // 2. One shard per worker, last stage first so that each one is spawned knowing its successor.
  const std::string prefix = fmt::format("gen-{}", token.substr(0, 8));
  r.shards.resize(static_cast<size_t>(world));
  for (int32_t s = pp - 1; s >= 0; --s) {
    for (int32_t rank = 0; rank < tp; ++rank) {
      const auto index = static_cast<size_t>(s * tp + rank);
      proto::shard_assignment a;
      a.model_dir = config.model;
      a.tp_rank = rank;
      a.tp_size = tp;
      a.layer_begin = r.stages[static_cast<size_t>(s)].layer_begin;
      a.layer_end = r.stages[static_cast<size_t>(s)].layer_end;
      a.stage = s;
      a.pp_size = pp;
      a.load_format = config.load_format;
      a.dtype = config.dtype;
      a.seed = config.seed;
      a.n_threads = plan.threads_per_shard;
      a.samples = s == pp - 1 && rank == 0;
      if (s + 1 < pp)
        a.next = r.shards[static_cast<size_t>((s + 1) * tp + rank)];
      a.data_plane_host = host;
      a.rendezvous_prefix = prefix;
      std::optional<std::string> error;
      self->request(r.workers[index], std::chrono::seconds{30}, proto::spawn_shard_atom::value, a)
          .receive([&](proto::shard_actor& shard) { r.shards[index] = std::move(shard); },
                   [&](caf::error& err) { error = sys.render(err); });
      if (error)
        fail(fmt::format("worker {} could not host stage {} rank {}: {}", index, s, rank, *error));
    }
  }

  // 3. Load, size the cache, and start the scheduler and the engine, as in-process.
  try {
    finish_replica(sys, config, plan);
  } catch (...) {
    for (auto& p : r.processes)
      p->kill(SIGKILL);
    r.processes.clear();
    throw;
  }
  return std::move(plan.r);
}

}  // namespace actorllm::actors
