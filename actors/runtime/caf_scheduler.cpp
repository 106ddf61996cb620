#include "actors/runtime/caf_scheduler.hpp"

namespace actorllm::actors {

void configure_caf_scheduler(caf::actor_system_config& cfg, size_t threads) {
  cfg.set("scheduler.max-threads", threads);
  // No 50 us polling phase (work_stealing's "moderate" strategy): from the spin straight to the condition variable,
  // which a message from outside the scheduler signals at once.
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
}

}  // namespace actorllm::actors
