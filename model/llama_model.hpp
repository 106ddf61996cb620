// The Llama-family forward pass (Llama 2/3, Mistral, Qwen2/3) of one shard: a layer range of one pipeline stage,
// sliced for one tensor-parallel rank, over a flattened batch and a paged KV cache, on any backend.
#pragma once

#include "comm/collective.hpp"
#include "kernels/backend.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_cache.hpp"
#include "model/layer_weights.hpp"
#include "model/layers.hpp"
#include "model/lora_slots.hpp"
#include "model/model_config.hpp"
#include "model/model_weights.hpp"
#include "model/moe_layer.hpp"
#include "model/step_inputs.hpp"
#include "model/weight_table.hpp"

#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

namespace actorllm::model {

/// One shard of a Llama-family model, built from weights that were loaded already sliced for it. Assembled from the
/// shared blocks of model/layers.hpp, with the TP all-reduces after the row-split projections (o_proj, down_proj)
/// and after the vocab-split embedding, and an all-gather of the vocab-split logits. Holds a backend and tensor
/// handles; never names a device.
class llama_model {
 public:
  /// `comm` is this shard's TP group (its size must equal shard.tp_size); `be` runs the ops and holds the weights.
  /// With shard.expert_parallel the MoE layers dispatch over `ep_comm`, the EP group of shard.ep_size() ranks
  /// (lockstep data-parallel replicas: every replica's TP ranks), or over `comm` when it is null (one replica: the
  /// EP group is the TP group). All must outlive the model.
  llama_model(const model_config& cfg, model_weights weights, const shard_spec& shard, tp_collective& comm, backend& be,
              tp_collective* ep_comm = nullptr);

  const model_config& config() const { return cfg_; }
  const shard_spec& shard() const { return shard_; }
  backend& device_backend() const { return be_; }
  bool is_first_stage() const { return layer_begin_ == 0; }
  bool is_last_stage() const { return layer_end_ == cfg_.n_layer; }
  /// Bytes of weights this shard holds.
  size_t weight_bytes() const { return tensors_.weight_bytes; }
  /// Turns LoRA on (before the first step): every Linear an adapter may target gets limits.max_loras device slots.
  void enable_lora(const lora_limits& limits);
  /// The adapter slots (null while LoRA is off).
  lora_slots* lora() { return lora_.get(); }
  /// The type the norms write a block's input (layer_scratch::h) in: the type every matmul that reads it takes as it
  /// is (backend::matmul_input_type; CUDA: bf16 for bf16 weights), so no conversion runs between the norm and the
  /// q/k/v and gate/up GEMMs. f32 whenever anything else reads it (LoRA's shrink, a MoE layer) or the weights differ.
  dtype normed_input_type() const;
  /// Tokens routed to each expert so far, over this shard's MoE layers (empty for a dense model).
  std::vector<uint64_t> expert_load() const { return moe_ ? moe_->expert_load() : std::vector<uint64_t>{}; }
  /// Expert-parallel load balancing's record (null without EPLB).
  const expert_balancer* balancer() const { return moe_ ? moe_->balancer() : nullptr; }
  /// Expert parallelism: what this rank's MoE exchanges (dispatch, combine, EPLB's weight moves) moved over the EP
  /// group so far (tp_collective::exchange_statistics); zeros without expert parallelism.
  exchange_stats expert_exchange() const {
    return moe_ && shard_.expert_parallel ? moe_->exchange() : exchange_stats{};
  }
  /// What the shard's KV cache must hold per token slot, for a given block size, in the KV element type.
  kv_cache_shape cache_shape(int64_t block_size) const;
  /// The element type the KV cache stores (--kv-cache-dtype, resolved; f32 unless set): attention reads it back to
  /// f32, so it changes the cache's bytes per token, not the math. Set before the cache is sized.
  void set_kv_cache_dtype(dtype type);
  dtype kv_cache_dtype() const { return kv_dtype_; }
  /// How a step's rows are split between the copies of the TP group (prefill context parallelism; one copy: all).
  row_split rows_of_copies() const { return row_split{shard_.pcp_size, shard_.pcp_rank}; }

  /// Runs one step over this shard's layers. The first stage embeds in.tokens; a later stage reads `hidden_in`
  /// (f32 [n_tokens, n_embd] on the backend: the previous stage's output). The last stage returns the logits of
  /// in.sample_rows (f32 [n_sample, n_vocab], in that order; empty when nothing is sampled); other stages return
  /// the hidden states for the next stage (a fresh tensor, owned by the caller).
  tensor forward(const step_inputs& in, kv_cache& cache, const tensor& hidden_in = {});

  /// forward() on host data, for tests and tools: prepares the inputs of `batch` and downloads the result. With
  /// LoRA on, the batch's adapters (batch_sequence::lora_id) are put in slots from `loras` first.
  std::vector<float> forward(const forward_batch& batch, kv_cache& cache, std::span<const float> hidden_in = {},
                             std::span<const lora_source> loras = {});

  /// Whether this shard has MoE layers whose experts are spread over an EP group of more than one rank: such a
  /// shard must take part in every step of its group, idle_step() when it has no tokens.
  bool serves_experts() const;
  /// A step of lockstep expert parallelism with no tokens on this replica: each of the shard's MoE layers runs its
  /// dispatch and combine only (moe_block::forward_idle), so that its experts serve the rows other replicas route
  /// to them. Touches neither the KV cache nor the residual stream. Requires serves_experts().
  void idle_step();

  /// Whether forward_into may run here (a decode graph's forward): the only stage, one TP rank, a dense model.
  bool graph_capable() const;
  /// Sizes the activation scratch of forward_into for `n_rows` rows now, so that a graph capture allocates none.
  void reserve_graph_activations(int64_t n_rows);
  /// The forward of a decode graph: forward() over an activation scratch of its own (eager steps never move it),
  /// writing the logits of in.sample_rows into `logits` (f32 [in.n_sample, n_vocab], kept by the caller) instead of
  /// a fresh tensor. Allocates nothing when reserve_graph_activations covered the rows. Requires graph_capable().
  void forward_into(const step_inputs& in, kv_cache& cache, const tensor& logits);

 private:
  /// The residual stream and the scratch of one kind of forward, `capacity` rows each.
  /// Context parallel attention's buffers, for steps of up to full_capacity rows in all and local_capacity rows
  /// per copy of the TP group.
  struct cp_buffers {
    int64_t full_capacity = 0;
    int64_t local_capacity = 0;
    cp_scratch t;
    tensor x_ranks;  // [G * local, n_embd]: every rank's residual rows at the stage's end (pcp)
    tensor x_full;   // [P * local, n_embd]: every row's (pcp)
  };
  struct activations {
    int64_t capacity = 0;
    tensor x;            // the residual stream [capacity, n_embd]
    layer_scratch full;  // scratch of `capacity` rows
    cp_buffers cp;
  };

  /// The type every dense layer's `readers` weights take their x in as it is (backend::matmul_input_type), when they
  /// agree and the shard is dense without LoRA; else f32.
  dtype matmul_input_type_of(std::vector<tensor> (*readers)(const layer_weights&)) const;
  /// The widest stacked projection's rows (q|k|v or gate|up): the columns of layer_scratch::stacked.
  int64_t stacked_width() const;
  /// Scratch views of n rows of `a` (reallocated when a batch needs more than ever before).
  layer_scratch scratch(activations& a, int64_t n);
  /// s.cp's views for a step of n rows, c of them this copy's (nothing without context parallelism).
  void context_parallel_scratch(activations& a, int64_t n, int64_t c, layer_scratch& s);
  /// The layers of this shard over in's rows; returns the residual stream's first in.n_tokens rows.
  tensor run_layers(const step_inputs& in, kv_cache& cache, const tensor& hidden_in, activations& a);
  /// The logits of in.sample_rows, into `logits` when given (one rank only), else into a fresh tensor.
  tensor output_logits(const step_inputs& in, const tensor& x, const tensor& h, const tensor& logits = {});

  model_config cfg_;
  shard_spec shard_;
  tp_collective& comm_;
  backend& be_;
  int64_t layer_begin_ = 0;
  int64_t layer_end_ = 0;
  int64_t n_head_ = 0;          // query heads on this rank
  int64_t n_head_kv_ = 0;       // kv heads on this rank
  int64_t n_ff_ = 0;            // feed-forward rows on this rank
  bool unstacked_mlp_ = false;  // some dense layer's gate|up is bound apart (stacked_linear::parts)
  model_tensors tensors_;
  rope_table rope_;
  std::vector<int64_t> windows_;    // per local layer: the sliding window (0: full attention)
  dtype kv_dtype_ = dtype::f32;     // the KV cache's element type
  std::unique_ptr<moe_block> moe_;  // the MoE layers' helper (MoE architectures only)
  std::unique_ptr<lora_slots> lora_;

  activations eager_;                                // forward()'s
  activations graph_;                                // forward_into()'s: what the decode graphs read
  std::unique_ptr<step_input_builder> host_inputs_;  // for the host forward()
};

}  // namespace actorllm::model
