// The worker process: see worker_process.hpp.
#include "actors/runtime/worker_process.hpp"

#include "actorllm/proto/type_ids.hpp"
#include "actors/runtime/caf_scheduler.hpp"
#include "actors/runtime/worker_actor.hpp"
#include "comm/abort_registry.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <thread>

namespace actorllm::actors {

int run_worker(const worker_options& options) {
  // Gloo writes to its peers with writev(), which raises SIGPIPE when a peer has died: ignored, the write fails
  // with EPIPE and the step reports which peer was lost, instead of this worker dying without a word.
  ::signal(SIGPIPE, SIG_IGN);
  caf::actor_system_config cfg;
  proto::add_message_types(cfg);
  enable_network(cfg, options.tls, options.control_key);
  configure_caf_scheduler(cfg, 2);
  caf::actor_system sys{cfg};
  // The engine may still be coming up: retry the connection for a few seconds.
  caf::expected<proto::worker_registry_actor> registry{caf::error{}};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  for (;;) {
    registry = connect_control<proto::worker_registry_actor>(sys, options.registry_host, options.registry_port);
    if (registry || std::chrono::steady_clock::now() > deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
  }
  if (!registry) {
    log::error("worker", "worker {}: cannot reach the engine at {}:{}: {}", options.index, options.registry_host,
               options.registry_port, describe_connect_error(sys, registry.error()));
    return 1;
  }
  auto worker = spawn_worker(sys, *registry, options.index);
  proto::worker_hello hello;
  hello.index = options.index;
  hello.token = options.token;
  hello.pid = static_cast<int32_t>(::getpid());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  hello.host = host;
  hello.worker = worker;
  caf::scoped_actor self{sys};
  bool ok = false;
  self->request(*registry, std::chrono::seconds{30}, proto::register_atom::value, hello)
      .receive([&](caf::ok_atom) { ok = true; },
               [&](caf::error& err) {
                 log::error("worker", "worker {}: the engine refused it: {}", options.index, sys.render(err));
               });
  if (!ok)
    return 1;
  // Serve until the engine (its registry) is gone: then end at once, without waiting for shard threads that may
  // be blocked in a collective with peers that are gone as well.
  self->monitor(*registry);
  self->receive([](caf::down_msg&) {});
  log::info("worker", "worker {}: the engine is gone; exiting", options.index);
  // The engine tears a replica down this way when it declared one of its workers dead: abort this process's device
  // communicators (NCCL) so that their peers on other hosts see the group end now rather than at their timeout.
  // Bounded: an abort that hangs must not keep a dead replica's worker alive.
  {
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    std::thread([done] {
      comm::abort_registry::process().abort_all("the engine is gone (its replica was failed or stopped)");
      done->set_value();
    }).detach();
    finished.wait_for(std::chrono::seconds{2});
  }
  std::fflush(stderr);
  std::_Exit(0);
}

}  // namespace actorllm::actors
