// The architecture hyper-parameters of a Hugging Face checkpoint, read from its config.json (and the end-of-sequence
// ids from generation_config.json), validated once so the rest of the engine can trust them.
#pragma once

#include "kernels/dtype.hpp"
#include "kernels/rope_scaling.hpp"
#include "model/quantization_config.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::model {

/// What the Llama-family forward pass needs to know about a model. Names follow llama.cpp; the comments give the
/// config.json key each one comes from.
struct model_config {
  /// architectures[0]: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM,
  /// Qwen2MoeForCausalLM, Qwen3MoeForCausalLM
  std::string architecture;
  /// model_type: llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe (derived from the architecture when
  /// absent)
  std::string model_type;
  int64_t n_embd = 0;                   ///< hidden_size
  int64_t n_ff = 0;                     ///< intermediate_size
  int64_t n_layer = 0;                  ///< num_hidden_layers
  int64_t n_head = 0;                   ///< num_attention_heads
  int64_t n_head_kv = 0;                ///< num_key_value_heads (n_head when absent or null)
  int64_t head_dim = 0;                 ///< head_dim, or n_embd / n_head when absent or null
  int64_t n_vocab = 0;                  ///< vocab_size
  int64_t max_position_embeddings = 0;  ///< max_position_embeddings
  /// rope_theta, or rope_parameters.rope_theta (transformers 5); 10000 (transformers' default) when neither says.
  double rope_theta = 10000.0;
  rope_scaling rope;                 ///< rope_scaling, or rope_parameters (transformers 5): none, linear or llama3
  float rms_norm_eps = 1e-6f;        ///< rms_norm_eps
  bool tie_word_embeddings = false;  ///< tie_word_embeddings: lm_head reuses model.embed_tokens.weight
  bool attention_bias = false;       ///< q/k/v_proj have biases (always for qwen2, whose config has no such key)
  /// o_proj has a bias too: HF Llama/Mistral/Qwen3 put `attention_bias` on o_proj as well, Qwen2 does not.
  bool o_proj_bias = false;
  bool qk_norm = false;                 ///< Qwen3: per-head RMSNorm of q and k (self_attn.q_norm / k_norm weights)
  dtype torch_dtype = dtype::f32;       ///< torch_dtype (or dtype): the checkpoint's declared element type
  std::optional<int32_t> bos_token_id;  ///< bos_token_id
  /// generation_config.json's eos_token_id (an int or a list) when that file says, else config.json's.
  std::vector<int32_t> eos_token_ids;
  /// The attention window of each layer (size n_layer), as transformers resolves it: 0 = full causal attention;
  /// W > 0 = the layer's queries see only the last W positions (key k is visible from query q when q - W < k <= q).
  /// Mistral: `sliding_window` on every layer (4096 when the key is absent, none when null). Qwen2/Qwen3: only with
  /// `use_sliding_window: true`, on the layers `layer_types` marks "sliding_attention" (without that list: layers
  /// i >= max_window_layers). Llama: always 0 (HF Llama has no sliding window; the key is ignored there too).
  std::vector<int64_t> layer_window;

  // ---- mixture of experts (MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM; zero/empty otherwise) ----
  int64_t n_expert = 0;       ///< num_local_experts (Mixtral) / num_experts (Qwen MoE); 0 = a dense model
  int64_t n_expert_used = 0;  ///< num_experts_per_tok: the top-k of the router
  int64_t n_ff_exp = 0;       ///< each expert's intermediate size: moe_intermediate_size (Qwen), intermediate_size
  int64_t n_ff_shexp = 0;     ///< shared_expert_intermediate_size (Qwen2-MoE; 0: no shared expert)
  /// Renormalise the top-k routing weights to sum to 1: always for Mixtral, norm_topk_prob for Qwen2/3-MoE.
  bool norm_topk_prob = false;
  /// Per layer (size n_layer when n_expert > 0): true where the MLP is the sparse MoE block. Qwen MoE: layers not in
  /// mlp_only_layers with (layer + 1) % decoder_sparse_step == 0; Mixtral: every layer.
  std::vector<bool> layer_moe;
  /// quantization_config (compression_config in older compressed-tensors checkpoints): how the Linear weights are
  /// stored; method none for a float checkpoint.
  quantization_config quant;

  /// True when `layer` is a mixture-of-experts layer.
  bool is_moe_layer(int64_t layer) const {
    return layer >= 0 && layer < static_cast<int64_t>(layer_moe.size()) && layer_moe[static_cast<size_t>(layer)];
  }

  /// The rotary embedding parameters: {head_dim, rope_theta, rope}.
  rope_config rope_cfg() const;
  /// layer_window[layer]; 0 (full attention) when `layer` is out of range or layer_window is empty.
  int64_t window_for(int64_t layer) const;
};

/// Reads DIR/config.json and, when present, DIR/generation_config.json. Throws model_error naming the file and the
/// field when a required field is absent, has the wrong type or an impossible value, when the architecture,
/// hidden_act, rope type or another math-changing setting (partial rotary, logit softcapping, Granite multipliers,
/// experts, per-layer attention kinds other than full/sliding) is one actorllm does not implement, when two fields
/// disagree (rope_theta and rope_parameters.rope_theta, ...), or when the file cannot be read.
model_config load_model_config(const std::filesystem::path& dir);

/// Parses the text of a config.json. `origin` names the file in error messages.
model_config parse_model_config(std::string_view config_json, std::string_view origin);

/// Applies the text of a generation_config.json to `cfg`: its eos_token_id (an int or a list of ints), when present
/// and not null, replaces cfg.eos_token_ids. `origin` names the file in error messages.
void apply_generation_config(model_config& cfg, std::string_view generation_config_json, std::string_view origin);

}  // namespace actorllm::model
