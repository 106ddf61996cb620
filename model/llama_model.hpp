// The Llama-family forward pass (Llama 2/3, Mistral, Qwen2/3) of one shard: a layer range of one pipeline stage,
// sliced for one tensor-parallel rank, over a flattened batch and a paged KV cache.
#pragma once

#include "kernels/collective.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_cache.hpp"
#include "model/model_config.hpp"
#include "model/weight_loader.hpp"
#include "model/weight_table.hpp"
#include "util/thread_pool.hpp"

#include <span>
#include <vector>

namespace actorllm::model {

/// One shard of a Llama-family model, built from weights that were loaded already sliced for it. Built like
/// llama.cpp's graphs from shared steps (norm, attention, feed-forward), with the TP all-reduces after the row-split
/// projections (o_proj, down_proj) and after the vocab-split embedding, and an all-gather of the vocab-split logits.
class llama_model {
 public:
  /// `comm` is this shard's TP group (its size must equal shard.tp_size); `pool` runs the kernels. Both must outlive
  /// the model.
  llama_model(const model_config& cfg, model_weights weights, const shard_spec& shard, tp_collective& comm,
              thread_pool& pool);

  const model_config& config() const { return cfg_; }
  const shard_spec& shard() const { return shard_; }
  bool is_first_stage() const { return layer_begin_ == 0; }
  bool is_last_stage() const { return layer_end_ == cfg_.n_layer; }
  /// Bytes of weights this shard holds.
  size_t weight_bytes() const { return weights_.total_bytes(); }
  /// What the shard's KV cache must hold per token slot, for a given block size.
  kv_cache_shape cache_shape(int64_t block_size) const;

  /// Runs one step over this shard's layers. The first stage embeds batch.tokens; a later stage reads `hidden_in`
  /// ([n_tokens, n_embd], the previous stage's output). The last stage returns the logits of batch.sample_rows
  /// ([n_sample_rows, n_vocab], in that order); other stages return the hidden states for the next stage.
  std::vector<float> forward(const forward_batch& batch, kv_cache& cache, std::span<const float> hidden_in = {});

 private:
  struct layer_weights {
    const host_tensor* attn_norm = nullptr;
    const host_tensor* wq = nullptr;
    const host_tensor* wk = nullptr;
    const host_tensor* wv = nullptr;
    const host_tensor* wo = nullptr;
    const host_tensor* q_norm = nullptr;  // Qwen3
    const host_tensor* k_norm = nullptr;  // Qwen3
    std::vector<float> bq, bk, bv;        // Qwen2 biases, as f32 (empty when absent)
    std::vector<float> bo;  // o_proj bias (attention_bias on Llama/Mistral/Qwen3), added after the all-reduce
    const host_tensor* ffn_norm = nullptr;
    const host_tensor* w_gate = nullptr;
    const host_tensor* w_up = nullptr;
    const host_tensor* w_down = nullptr;
  };

  void attention_block(const layer_weights& lw, int64_t local_layer, const forward_batch& batch, kv_cache& cache);
  void feed_forward_block(const layer_weights& lw, int64_t n_tokens);
  std::vector<float> output_logits(const forward_batch& batch);

  model_config cfg_;
  model_weights weights_;
  shard_spec shard_;
  tp_collective& comm_;
  thread_pool& pool_;
  int64_t layer_begin_ = 0;
  int64_t layer_end_ = 0;
  int64_t n_head_ = 0;     // query heads on this rank
  int64_t n_head_kv_ = 0;  // kv heads on this rank
  int64_t n_ff_ = 0;       // feed-forward rows on this rank
  std::vector<float> inv_freq_;
  std::vector<layer_weights> layers_;
  const host_tensor* embed_ = nullptr;
  const host_tensor* final_norm_ = nullptr;
  const host_tensor* lm_head_ = nullptr;

  // Scratch reused across steps; sized for the largest batch seen so far.
  std::vector<float> x_, h_, q_, k_, v_, attn_, proj_, gate_, up_;
  std::vector<int64_t> slots_;
  std::vector<cpu::attention_seq> seqs_;
};

}  // namespace actorllm::model
