// Calls to the replicas' engines that answer through a callback instead of blocking the caller (LLM::stats_async,
// LLM::reset_prefix_cache_async): each spawns a short-lived actor that asks every engine at once and calls back,
// once, when the last one has answered or timed out. The blocking LLM::stats() and reset_prefix_cache() wait on them.
#pragma once

#include "actorllm/engine_stats.hpp"
#include "actorllm/error.hpp"
#include "actorllm/proto/interfaces.hpp"

#include <caf/fwd.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace actorllm::detail {

/// How long an engine may take to answer one of these calls before it counts as not answering.
inline constexpr std::chrono::seconds engine_call_timeout{10};

/// One engine's answer to a stats request.
struct stats_answer {
  bool asked = false;                 ///< false: there was no engine to ask (a replica down or being rebuilt)
  std::optional<engine_stats> stats;  ///< its snapshot, when it answered
  std::string failure;                ///< why it did not, when asked and not answered
};

/// Asks each engine of `engines` for a stats snapshot (a null handle is not asked) and calls `done` with their answers
/// in the same order, once, on an actor thread, within engine_call_timeout. `done` must not block.
void ask_stats(caf::actor_system& sys, std::vector<proto::engine_actor> engines,
               std::function<void(std::vector<stats_answer>)> done);

/// `base` (the replica set's own view: one replica_stats per engine asked, in order, with its health, routing and
/// restarts) completed by the engines' answers: their counts summed, block counts of the first replica that answered,
/// the highest KV-cache usage, and a replica that did not answer marked unhealthy with the reason.
engine_stats merge_stats(engine_stats base, const std::vector<stats_answer>& answers);

/// Asks each engine of `engines` to forget its cached KV blocks and calls `done`, once, on an actor thread, with the
/// blocks forgotten over the engines that answered and the first failure (an engine that did not answer). `done` must
/// not block.
void reset_prefix_caches(caf::actor_system& sys, std::vector<proto::engine_actor> engines,
                         std::function<void(int32_t forgotten, std::optional<error> failure)> done);

}  // namespace actorllm::detail
