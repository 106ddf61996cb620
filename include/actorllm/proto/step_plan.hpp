// CAF inspection of the step plan (engine/step_plan.hpp: what scheduler_core::schedule() hands out and every shard
// receives), declared in the engine's namespace so that argument-dependent lookup finds it, and the protocol's names
// for its types. The engine itself stays free of CAF. A setup's ops::sampling_spec is inspected in
// actorllm/proto/sampling_params.hpp.
#pragma once

#include "actorllm/proto/sampling_params.hpp"
#include "engine/step_plan.hpp"

#include <caf/meta/type_name.hpp>

namespace actorllm::engine {

/// CAF inspection of lora_ref.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, lora_ref& x) {
  return f(caf::meta::type_name("lora_ref"), x.id, x.name, x.path);
}

/// CAF inspection of scheduled_sequence.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scheduled_sequence& x) {
  return f(caf::meta::type_name("scheduled_sequence"), x.seq, x.query_begin, x.n_query, x.new_table, x.blocks,
           x.lora_id);
}

/// CAF inspection of sampler_setup.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampler_setup& x) {
  return f(caf::meta::type_name("sampler_setup"), x.request_id, x.spec, x.prompt_ids, x.resume_output_ids);
}

/// CAF inspection of step_plan.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_plan& x) {
  return f(caf::meta::type_name("step_plan"), x.step_id, x.tokens, x.positions, x.sequences, x.dropped_seqs,
           x.sample_rows, x.sample_seqs, x.score_rows, x.score_seqs, x.score_positions, x.score_tokens, x.new_requests,
           x.released_requests, x.loras, x.idle);
}

}  // namespace actorllm::engine

namespace actorllm::proto {

using seq_ref = engine::seq_id;                         ///< one output sequence: index `index` of request `request_id`
using lora_ref = engine::lora_ref;                      ///< a LoRA adapter as the shards load it
using scheduled_sequence = engine::scheduled_sequence;  ///< a sequence's rows and block-table diff
using sampler_setup = engine::sampler_setup;            ///< sampler state to create for a request
using step_plan = engine::step_plan;                    ///< one step, sent to every shard

}  // namespace actorllm::proto
