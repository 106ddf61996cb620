// `actorllm check`: the cluster's communication sanity check (actors/cluster/cluster_check.hpp).
#include "apps/command_registry.hpp"

#include "apps/cluster_tls_options.hpp"

#include "actors/cluster/cluster_check.hpp"

#include <cstdlib>
#include <iostream>
#include <memory>

namespace actorllm::app {
namespace {

command_registration check_command{
    "check",
    "Check communication across every device of a running cluster (all-reduce, every pair; Gloo, and NCCL on GPUs)",
    [](CLI::App& sub) {
      auto o = std::make_shared<actors::cluster_check_options>();
      const char* address = std::getenv("ACTORLLM_CLUSTER_ADDRESS");
      o->address = address != nullptr ? address : "127.0.0.1:6380";
      const char* token = std::getenv("ACTORLLM_CLUSTER_TOKEN");
      o->token = token != nullptr ? token : "";
      sub.add_option("--address", o->address, "The cluster head, HOST:PORT (default: $ACTORLLM_CLUSTER_ADDRESS)")
          ->capture_default_str();
      sub.add_option("--cluster-token", o->token, "The cluster's token (default: $ACTORLLM_CLUSTER_TOKEN)");
      sub.add_option("--bytes", o->large_bytes, "Payload of the bandwidth measurements")->capture_default_str();
      sub.add_option("--iterations", o->iterations, "Timed repetitions (the best is shown)")->capture_default_str();
      sub.add_option("--workers-per-node", o->max_workers_per_node,
                     "At most this many ranks per node (0: one per "
                     "device)");
      add_cluster_tls_options(sub, o->tls.certificate, o->tls.key, o->tls.ca_file);
      return [o]() {
        o->tls = actors::control_tls::from_environment(o->tls);
        o->tls.check();
        return actors::run_cluster_check(*o, std::cout);
      };
    }};

}  // namespace
}  // namespace actorllm::app
