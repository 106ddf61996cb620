// The config.json of the small mixture-of-experts models the MoE tests decode with random weights against the float64
// reference: Mixtral (8 experts, top 2), Qwen2-MoE (a shared expert, a dense layer, top 3 not renormalised) and
// Qwen3-MoE (q/k norm, 6 experts, renormalised top 2). `extra` adds keys (a leading comma).
#pragma once

#include <string>

namespace actorllm::model::test_util {

inline std::string mixtral_json(const std::string& extra = {}) {
  return R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64,
      "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 97, "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
      "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": null, "router_aux_loss_coef": 0.02,
      "output_router_logits": false, "router_jitter_noise": 0.0, "tie_word_embeddings": false)" +
         extra + "}";
}

inline std::string qwen2_moe_json(const std::string& extra = {}) {
  return R"({"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 64,
      "intermediate_size": 48, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 40,
      "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
      "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "num_experts": 8,
      "num_experts_per_tok": 3, "norm_topk_prob": false, "decoder_sparse_step": 1, "mlp_only_layers": [1],
      "use_sliding_window": false, "tie_word_embeddings": false)" +
         extra + "}";
}

inline std::string qwen3_moe_json(const std::string& extra = {}) {
  return R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
      "intermediate_size": 48, "moe_intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 97, "max_position_embeddings": 128,
      "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "num_experts": 6, "num_experts_per_tok": 2,
      "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [], "tie_word_embeddings": false)" +
         extra + "}";
}

}  // namespace actorllm::model::test_util
