// The engine actor: a thin shell around output_processor. It takes submissions from front ends, hands tokenized
// requests to the scheduler, turns each step's tokens into text and stop decisions, and sends every submitter one
// output_batch per step.
#pragma once

#include "actorllm/proto/interfaces.hpp"
#include "actors/runtime/output_processor.hpp"
#include "text/tokenizer.hpp"

#include <caf/fwd.hpp>

#include <optional>

namespace actorllm::actors {

/// Everything the engine is built from.
struct engine_args {
  proto::scheduler_actor scheduler;
  std::optional<text::tokenizer> tokenizer;
  model_limits limits;
};

/// Spawns the engine (event-based) and connects the scheduler's step updates to it.
proto::engine_actor spawn_engine(caf::actor_system& sys, engine_args args);

}  // namespace actorllm::actors
