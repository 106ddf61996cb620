// `actorllm worker`: a worker process of the mp and cluster executors. Engines (and node agents) start it; users
// do not. It joins the engine's worker registry and hosts the shards it is given (actors/runtime/worker_process.hpp).
#include "apps/command_registry.hpp"

#include "actors/runtime/worker_process.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace actorllm::app {
namespace {

struct worker_cli {
  std::string registry;
  int32_t index = 0;
  int32_t replica = 0;  // only names the process (ps, the agent's log): the registry already tells replicas apart
};

int run_worker_command(const worker_cli& o) {
  const auto colon = o.registry.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw std::invalid_argument(fmt::format("--registry: '{}' is not HOST:PORT", o.registry));
  actors::worker_options w;
  w.registry_host = o.registry.substr(0, colon);
  const int port = std::stoi(o.registry.substr(colon + 1));
  if (port <= 0 || port > 65535)
    throw std::invalid_argument(fmt::format("--registry: port {} is outside [1, 65535]", port));
  w.registry_port = static_cast<uint16_t>(port);
  w.index = o.index;
  const char* token = std::getenv("ACTORLLM_WORKER_TOKEN");
  w.token = token != nullptr ? token : "";
  const char* key = std::getenv(actors::control_key_variable);
  w.control_key = key != nullptr ? key : "";
  w.tls = actors::control_tls::from_environment();
  w.tls.check();
  return actors::run_worker(w);
}

command_registration worker_command{
    "worker", "(internal) a worker process of the mp and cluster executors, started by the engine", [](CLI::App& sub) {
      auto o = std::make_shared<worker_cli>();
      sub.add_option("--registry", o->registry, "The engine's worker registry, HOST:PORT")->required();
      sub.add_option("--index", o->index, "This worker's index, given by the engine")->required();
      sub.add_option("--replica", o->replica, "The data-parallel replica this worker belongs to (names the process)");
      return [o]() { return run_worker_command(*o); };
    }};

}  // namespace
}  // namespace actorllm::app
