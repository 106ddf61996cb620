// The narrow interfaces an actor is handed to report to: the submitter of requests (output_sink), the engine as
// the scheduler sees it (update_sink), the scheduler as the sampler shard sees it (result_sink), and the next shard
// as a stage sees it (shard_link). Each is a subset of a long-lived role's interface (proto/interfaces.hpp).
#pragma once

#include "actorllm/proto/atoms.hpp"
#include "actorllm/proto/output_batch.hpp"
#include "actorllm/proto/shared_plan.hpp"
#include "actorllm/proto/stage_handoff.hpp"
#include "actorllm/proto/step_result.hpp"
#include "actorllm/proto/step_update.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace actorllm::proto {

/// Whoever submits requests: receives one output_batch per step with news for it.
using output_sink = caf::typed_actor<caf::reacts_to<output_batch>>;

/// The engine, as the scheduler reports to it.
using update_sink = caf::typed_actor<caf::reacts_to<step_update>>;

/// The scheduler, as the sampler shard (and any shard that fails a step) reports to it.
using result_sink = caf::typed_actor<caf::reacts_to<step_result>>;

/// A scheduler, as the other schedulers of a lockstep set (expert parallelism over data-parallel replicas) tell it
/// how many steps they dispatched.
using round_sink = caf::typed_actor<caf::reacts_to<lockstep_round_atom, uint64_t>>;

/// A shard, as the scheduler (every step's plan) and the previous stage (its output for a step) feed it.
using shard_link = caf::typed_actor<caf::reacts_to<shared_plan>, caf::reacts_to<stage_handoff>>;

}  // namespace actorllm::proto
