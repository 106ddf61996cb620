// The weights of one shard bound to the places the forward pass reads them from: one struct per transformer layer
// and one for the model-wide tensors. The weight table declares each Hugging Face name once, with the member it
// binds to (weight_decl::layer_slot / model_slot), so no name is spelled again in the forward pass; q/k/v_proj and
// gate/up_proj are bound as one stacked weight each (stack_decl, model/stacked_linear.hpp).
#pragma once

#include "kernels/tensor.hpp"
#include "model/moe_weights.hpp"
#include "model/stacked_linear.hpp"

#include <array>
#include <cstdint>
#include <vector>

namespace actorllm::model {

/// The LoRA adapters of one Linear layer on this shard, one per slot (model/lora_slots.hpp): a f32 [max_loras,
/// max_lora_rank, in], b f32 [max_loras, out, max_lora_rank] (scaling folded in, smaller ranks zero-padded). Empty
/// without LoRA, and for a Linear no adapter may target (the MLP of a MoE layer).
struct lora_stack {
  tensor a, b;

  bool empty() const { return a.empty(); }
};

/// One transformer layer of the Llama family. Absent optional weights (biases, Qwen3's q/k norms) are empty tensors.
struct layer_weights {
  tensor attn_norm;  ///< input_layernorm
  /// q|k|v_proj (column-parallel: this rank's heads of each) stacked by rows, with their biases (Qwen2;
  /// attention_bias) as f32: parts 0, 1, 2 = q, k, v.
  stacked_linear qkv;
  tensor q_norm, k_norm;   ///< Qwen3's per-head RMSNorm of q and k
  tensor wo;               ///< o_proj (row-parallel)
  tensor bo;               ///< o_proj's bias (replicated, added after the all-reduce), as f32
  tensor ffn_norm;         ///< post_attention_layernorm
  stacked_linear gate_up;  ///< gate|up_proj (column-parallel) stacked by rows: parts 0, 1 = gate, up
  tensor w_down;           ///< down_proj (row-parallel)
  moe_weights moe;         ///< the sparse MLP block instead of gate/up/down on MoE layers (model/moe_weights.hpp)
  std::array<lora_stack, 7> lora;  ///< q, k, v, o, gate, up, down: indexed by lora_target (model/lora_adapter.hpp)
};

/// Everything one shard reads, on its backend.
struct model_tensors {
  tensor embed;                 ///< embed_tokens (vocab slice), first stage (and last when the lm_head is tied to it)
  tensor final_norm;            ///< model.norm, last stage
  tensor lm_head;               ///< lm_head (vocab slice), or the embedding when tie_word_embeddings; last stage
  int64_t vocab_row_begin = 0;  ///< first vocabulary row of this rank's embedding / lm_head slice
  std::vector<layer_weights> layers;  ///< the stage's layers, in order
  size_t weight_bytes = 0;            ///< bytes of all bound tensors
};

}  // namespace actorllm::model
