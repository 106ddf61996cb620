// Every message type of the protocol, registered once in a CAF type-ID block, and the one function that adds them
// (and actorllm's error category) to an actor_system_config.
#pragma once

#include "actorllm/proto/cluster.hpp"
#include "actorllm/proto/engine_stats.hpp"
#include "actorllm/proto/error.hpp"
#include "actorllm/proto/finish_sequences.hpp"
#include "actorllm/proto/interfaces.hpp"
#include "actorllm/proto/kv_cache_config.hpp"
#include "actorllm/proto/output_batch.hpp"
#include "actorllm/proto/request_output.hpp"
#include "actorllm/proto/request_spec.hpp"
#include "actorllm/proto/sampling_params.hpp"
#include "actorllm/proto/shared_plan.hpp"
#include "actorllm/proto/sinks.hpp"
#include "actorllm/proto/stage_handoff.hpp"
#include "actorllm/proto/step_plan.hpp"
#include "actorllm/proto/step_result.hpp"
#include "actorllm/proto/step_update.hpp"
#include "actorllm/proto/submit_request.hpp"
#include "actorllm/proto/worker.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/type_id.hpp>

#include <string>

CAF_BEGIN_TYPE_ID_BLOCK(actorllm, caf::first_custom_type_id)

// Public value types that travel inside messages.
CAF_ADD_TYPE_ID(actorllm, (actorllm::sampling_params))
CAF_ADD_TYPE_ID(actorllm, (actorllm::engine_config))
CAF_ADD_TYPE_ID(actorllm, (actorllm::engine_stats))
CAF_ADD_TYPE_ID(actorllm, (actorllm::request_output))
CAF_ADD_TYPE_ID(actorllm, (actorllm::completion_output))
CAF_ADD_TYPE_ID(actorllm, (actorllm::stream_delta))
CAF_ADD_TYPE_ID(actorllm, (actorllm::token_logprob))
CAF_ADD_TYPE_ID(actorllm, (actorllm::sample_logprobs))
CAF_ADD_TYPE_ID(actorllm, (actorllm::prompt_logprob))
CAF_ADD_TYPE_ID(actorllm, (actorllm::usage_info))

// Front end <-> engine.
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::submit_request))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::output_batch))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::request_failure))

// Engine <-> scheduler.
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::request_spec))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::step_update))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::seq_update))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::prompt_update))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::finish_sequences))

// Scheduler <-> shards.
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::step_plan))
CAF_ADD_TYPE_ID(actorllm, (actorllm::engine::seq_id))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::scheduled_sequence))
CAF_ADD_TYPE_ID(actorllm, (actorllm::ops::sampling_spec))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::sampler_setup))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::shared_plan))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::stage_handoff))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::step_result))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::sampled_token))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::prompt_score))

// Cache sizing.
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::shard_profile))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::kv_cache_config))

// Handles passed in messages.
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::output_sink))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::update_sink))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::result_sink))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::shard_link))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::engine_actor))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::scheduler_actor))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::shard_actor))

// Engine <-> worker processes (executors mp and cluster).
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::shard_assignment))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::worker_hello))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::worker_actor))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::worker_registry_actor))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::comm_check_request))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::comm_pair_result))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::comm_check_result))

// Cluster: head registry <-> node agents <-> engines.
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::node_info))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::worker_launch))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::cluster_node))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::node_join))
CAF_ADD_TYPE_ID(actorllm, (std::vector<actorllm::proto::cluster_node>))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::node_agent_actor))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::cluster_registry_actor))
CAF_ADD_TYPE_ID(actorllm, (actorllm::proto::round_sink))

CAF_END_TYPE_ID_BLOCK(actorllm)

namespace actorllm::proto {

/// Adds every type of the block to `cfg` (so they serialize across processes) and the renderer of actorllm's
/// error category. Call once per actor_system_config, before the system starts.
inline void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::actorllm>();
  cfg.add_error_category(error_category, [](uint8_t code, caf::atom_value, const caf::message& context) {
    std::string out{to_string(static_cast<errc>(code))};
    if (context.match_elements<std::string>())
      out += ": " + context.get_as<std::string>(0);
    return out;
  });
}

}  // namespace actorllm::proto
