// The float64 reference of the mixture-of-experts MLP blocks (Mixtral's MixtralSparseMoeBlock, Qwen2-MoE's
// Qwen2MoeSparseMoeBlock with its shared expert, Qwen3-MoE's Qwen3MoeSparseMoeBlock), written from the
// transformers modeling code and independent of the engine's model/moe_layer: reference_logits calls it on the
// sparse layers.
#pragma once

#include "model/model_config.hpp"
#include "model/model_weights.hpp"

#include <cstdint>
#include <vector>

namespace actorllm::model::test_util {

/// The sparse MLP of layer `layer` applied to one normalised hidden state `h` (n_embd doubles): softmax over the
/// router logits, the cfg.n_expert_used most probable experts (ties: the lower id), their probabilities
/// renormalised when cfg.norm_topk_prob, the weighted sum of their SwiGLU outputs, plus sigmoid(shared_expert_gate
/// . h) times the shared expert's output when cfg.n_ff_shexp > 0. Weights are read by their Hugging Face names.
std::vector<double> reference_moe_mlp(const model_config& cfg, const model_weights& w, int64_t layer,
                                      const std::vector<double>& h);

}  // namespace actorllm::model::test_util
