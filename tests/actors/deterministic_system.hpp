// An actor system on CAF's deterministic test coordinator, set up like the engine's (its message types): a test
// delivers every message when it says so (sched.run(), run_jobs_filtered). Fixtures derive from it; their actor
// handles go before the system does.
#pragma once

#include "actorllm/proto/type_ids.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>

namespace actorllm::test {

struct deterministic_system {
  static caf::actor_system_config& testing(caf::actor_system_config& cfg) {
    cfg.set("scheduler.policy", caf::atom("testing"));
    proto::add_message_types(cfg);
    return cfg;
  }
  caf::actor_system_config cfg;
  caf::actor_system sys{testing(cfg)};
  caf::scheduler::test_coordinator& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::scoped_actor self{sys};
};

}  // namespace actorllm::test
