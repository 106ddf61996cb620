// The building blocks every architecture's forward pass is assembled from (llama.cpp's build_norm / build_attn /
// build_ffn): free functions over a backend, a TP group and one layer's bound weights. A new architecture reuses
// them (MoE adds moe_ffn beside ffn) instead of copying a forward pass.
#pragma once

#include "kernels/backend.hpp"
#include "kernels/collective.hpp"
#include "model/layer_weights.hpp"
#include "model/step_inputs.hpp"

#include <cstdint>

namespace actorllm::model {

/// What the helpers share within one step: the backend, the TP group, the step's inputs and the sizes of this rank.
struct layer_context {
  backend& be;
  tp_collective& comm;
  const step_inputs& in;
  const rope_table& rope;
  int64_t n_head = 0;     ///< query heads on this rank
  int64_t n_head_kv = 0;  ///< kv heads on this rank
  int64_t head_dim = 0;
  float norm_eps = 1e-6f;
  /// Decode context parallelism: the TP ranks [g * dcp_size, (g + 1) * dcp_size) keep shares of the same kv head's
  /// cache (the step's attention_batch says which positions are here) and attend together (attention()).
  int64_t dcp_size = 1;
};

/// The buffers of decode context parallel attention (empty without it): tp = the TP group's size, D = dcp_size,
/// nh = the rank's query heads.
struct dcp_scratch {
  tensor q_ranks;    ///< [tp * n, nh * head_dim]: every rank's queries
  tensor q_group;    ///< [n, D * nh * head_dim]: the DCP group's queries, its ranks' heads side by side
  tensor out, lse;   ///< [n, D * nh * head_dim], [n, D * nh]: this rank's partial attention of the group's heads
  tensor out_ranks;  ///< [tp * n, D * nh * head_dim]: every rank's partial outputs
  tensor lse_ranks;  ///< [tp * n, D * nh]: and their log-sum-exps
};

/// Scratch activations of one step, each a view of n_tokens rows.
struct layer_scratch {
  tensor h;            ///< [n, n_embd]: the normalised input of a block
  tensor q;            ///< [n, n_head * head_dim]
  tensor k, v;         ///< [n, n_head_kv * head_dim]
  tensor attn;         ///< [n, n_head * head_dim]
  tensor proj;         ///< [n, n_embd]: a block's output (all-reduced), added to the residual by the next norm
  tensor gate;         ///< [n, n_ff]
  tensor up;           ///< [n, n_ff]
  tensor lora_shrunk;  ///< [n, max_lora_rank]: lora_add's scratch (only with LoRA)
  dcp_scratch dcp;     ///< decode context parallel attention's buffers (only with it)
};

/// Self-attention of one layer: q/k/v projections (+ biases), q/k norm and RoPE, the cache write, paged attention
/// (within `window` positions when > 0), o_proj, the TP all-reduce and o_proj's bias. Reads s.h, writes s.proj.
void attention(const layer_context& ctx, const layer_weights& w, const kv_layer& cache, int64_t window,
               layer_scratch& s);

/// The SwiGLU feed-forward block: down(silu(gate(h)) * up(h)) and the TP all-reduce. Reads s.h, writes s.proj.
/// With LoRA rows in the step, every adapted projection adds its rows' low-rank updates (backend::lora_add) before
/// what follows it reads it: after q/k/v, o_proj and down_proj (before the all-reduce, which sums the row-parallel
/// ranks' partial updates), gate and up (computed apart from their SiLU whenever LoRA is on).
void ffn(const layer_context& ctx, const layer_weights& w, layer_scratch& s);

}  // namespace actorllm::model
