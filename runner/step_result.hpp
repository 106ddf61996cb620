// What the sampler shard (tp rank 0 of the last stage) returns to the scheduler after a step: one sampled token per
// sample row, with its logprobs when the request asked for them; or what went wrong. Plain structs: the protocol
// (proto/step_result.hpp) has their CAF inspection.
#pragma once

#include "actorllm/request_output.hpp"
#include "engine/seq_id.hpp"
#include "model/eplb_stats.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::runner {

/// The token sampled for one row.
struct sampled_token {
  int32_t token = 0;
  float logprob = 0.0f;  ///< always filled
  /// The top-k alternatives when the request asked for them, or its logprob_token_ids' logprobs in their order.
  std::vector<token_logprob> top;

  friend bool operator==(const sampled_token&, const sampled_token&) = default;
};

/// A score row's result: prompt token `token` at prompt position `position` + 1 of sequence `seq`.
struct prompt_score {
  engine::seq_id seq;
  int32_t position = 0;
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<token_logprob> top;

  friend bool operator==(const prompt_score&, const prompt_score&) = default;
};

/// The result of step `step_id`: tokens[i] for the plan's sample_rows[i]. A non-empty error means a shard failed
/// the step (tokens is then empty) and the replica is unusable.
struct step_result {
  uint64_t step_id = 0;
  std::vector<sampled_token> tokens;
  std::vector<prompt_score> prompt_scores;  ///< one per score row of the plan, in its order
  std::string error;
  double forward_seconds = 0.0;  ///< the sampler shard's time in the forward pass (block copies included)
  double sample_seconds = 0.0;   ///< its time sampling the rows
  /// MoE models: tokens routed to each expert since the shards started, summed over every stage's MoE layers (each
  /// stage's tp rank 0 counts its layers; the totals ride stage_handoff to the sampler shard); empty for dense models.
  std::vector<uint64_t> expert_tokens;
  /// Expert-parallel load balancing (--enable-eplb): the sampler shard's stage's record (every rank of its EP group
  /// computes the same); zeros otherwise.
  model::eplb_stats eplb;
  /// Expert parallelism: bytes the sampler shard's EP rank sent and received in the MoE exchanges since it started
  /// (its EP group's all-to-all: tokens out to their experts, outputs back, EPLB's weight moves); 0 otherwise.
  uint64_t ep_exchange_bytes = 0;

  friend bool operator==(const step_result&, const step_result&) = default;
};

}  // namespace actorllm::runner
