// The Llama-family forward pass of one shard.
#include "model/llama_model.hpp"

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cpu/rope.hpp"
#include "model/model_error.hpp"
#include "util/check.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

namespace actorllm::model {
namespace {

std::vector<float> bias_as_f32(const host_tensor* t) {
  std::vector<float> out;
  if (t == nullptr)
    return out;
  out.resize(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = load_as_f32(t->data(), t->type, i);
  return out;
}

template <class T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n)
    v.resize(static_cast<size_t>(n));
}

}  // namespace

llama_model::llama_model(const model_config& cfg, model_weights weights, const shard_spec& shard, tp_collective& comm,
                         thread_pool& pool)
    : cfg_(cfg), weights_(std::move(weights)), shard_(shard), comm_(comm), pool_(pool) {
  if (comm_.size() != shard.tp_size)
    throw model_error(fmt::format("TP group has {} ranks but the shard was sliced for tensor_parallel_size {}",
                                  comm_.size(), shard.tp_size));
  layer_begin_ = shard.layer_begin;
  layer_end_ = shard.layer_end < 0 ? cfg.n_layer : shard.layer_end;
  inv_freq_ = cpu::rope_inv_freq(cfg.rope_cfg());

  const int64_t hd = cfg.head_dim;
  for (int64_t l = layer_begin_; l < layer_end_; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    layer_weights lw;
    lw.attn_norm = &weights_.get(p + "input_layernorm.weight");
    lw.wq = &weights_.get(p + "self_attn.q_proj.weight");
    lw.wk = &weights_.get(p + "self_attn.k_proj.weight");
    lw.wv = &weights_.get(p + "self_attn.v_proj.weight");
    lw.wo = &weights_.get(p + "self_attn.o_proj.weight");
    lw.bq = bias_as_f32(weights_.find(p + "self_attn.q_proj.bias"));
    lw.bk = bias_as_f32(weights_.find(p + "self_attn.k_proj.bias"));
    lw.bv = bias_as_f32(weights_.find(p + "self_attn.v_proj.bias"));
    lw.bo = bias_as_f32(weights_.find(p + "self_attn.o_proj.bias"));
    lw.q_norm = weights_.find(p + "self_attn.q_norm.weight");
    lw.k_norm = weights_.find(p + "self_attn.k_norm.weight");
    lw.ffn_norm = &weights_.get(p + "post_attention_layernorm.weight");
    lw.w_gate = &weights_.get(p + "mlp.gate_proj.weight");
    lw.w_up = &weights_.get(p + "mlp.up_proj.weight");
    lw.w_down = &weights_.get(p + "mlp.down_proj.weight");
    layers_.push_back(std::move(lw));
  }
  if (!layers_.empty()) {
    n_head_ = layers_.front().wq->shape[0] / hd;
    n_head_kv_ = layers_.front().wk->shape[0] / hd;
    n_ff_ = layers_.front().w_gate->shape[0];
    if (n_head_kv_ <= 0 || n_head_ % n_head_kv_ != 0)
      throw model_error(
          fmt::format("shard holds {} query heads and {} kv heads: not a GQA grouping", n_head_, n_head_kv_));
  }
  if (is_first_stage())
    embed_ = &weights_.get("model.embed_tokens.weight");
  if (is_last_stage()) {
    final_norm_ = &weights_.get("model.norm.weight");
    lm_head_ = weights_.find("lm_head.weight");
    if (lm_head_ == nullptr)
      lm_head_ = &weights_.get("model.embed_tokens.weight");  // tie_word_embeddings
  }
}

kv_cache_shape llama_model::cache_shape(int64_t block_size) const {
  return kv_cache_shape{layer_end_ - layer_begin_, n_head_kv_, cfg_.head_dim, block_size};
}

std::vector<float> llama_model::forward(const forward_batch& batch, kv_cache& cache, std::span<const float> hidden_in) {
  const int64_t n_tokens = batch.n_tokens();
  const int64_t n_embd = cfg_.n_embd;
  ACTORLLM_CHECK(cache.shape().n_layer == layer_end_ - layer_begin_, "kv cache has the wrong number of layers");
  std::string problem = batch.validate(cache.block_size(), cache.n_blocks());
  ACTORLLM_CHECK(problem.empty(), problem.c_str());
  if (n_tokens == 0)
    return {};

  grow(x_, n_tokens * n_embd);
  if (is_first_stage()) {
    int64_t rows = embed_->shape[0];
    cpu::embedding(batch.tokens.data(), n_tokens, embed_->data(), embed_->type, embed_->row_offset, rows, n_embd,
                   x_.data());
    if (comm_.size() > 1)
      comm_.all_reduce_sum(x_.data(), n_tokens * n_embd);
  } else {
    ACTORLLM_CHECK(static_cast<int64_t>(hidden_in.size()) == n_tokens * n_embd, "hidden input has the wrong size");
    std::memcpy(x_.data(), hidden_in.data(), hidden_in.size() * sizeof(float));
  }

  // Cache slots of the new tokens, and the per-sequence view the attention kernel walks.
  const int64_t bs = cache.block_size();
  grow(slots_, n_tokens);
  seqs_.clear();
  for (const auto& seq : batch.sequences) {
    for (int32_t r = seq.query_begin; r < seq.query_begin + seq.n_query; ++r) {
      int64_t pos = batch.positions[static_cast<size_t>(r)];
      slots_[static_cast<size_t>(r)] =
          static_cast<int64_t>(seq.block_table[static_cast<size_t>(pos / bs)]) * bs + pos % bs;
    }
    seqs_.push_back(cpu::attention_seq{seq.query_begin, seq.n_query, seq.block_table.data(),
                                       static_cast<int32_t>(seq.block_table.size())});
  }

  for (size_t i = 0; i < layers_.size(); ++i) {
    attention_block(layers_[i], static_cast<int64_t>(i), batch, cache);
    feed_forward_block(layers_[i], n_tokens);
  }

  if (!is_last_stage())
    return std::vector<float>(x_.begin(), x_.begin() + n_tokens * n_embd);
  return output_logits(batch);
}

void llama_model::attention_block(const layer_weights& lw, int64_t local_layer, const forward_batch& batch,
                                  kv_cache& cache) {
  const int64_t n_tokens = batch.n_tokens();
  const int64_t n_embd = cfg_.n_embd;
  const int64_t hd = cfg_.head_dim;
  const int64_t q_dim = n_head_ * hd;
  const int64_t kv_dim = n_head_kv_ * hd;
  grow(h_, n_tokens * n_embd);
  grow(q_, n_tokens * q_dim);
  grow(k_, n_tokens * kv_dim);
  grow(v_, n_tokens * kv_dim);
  grow(attn_, n_tokens * q_dim);
  grow(proj_, n_tokens * n_embd);

  cpu::rms_norm(x_.data(), n_tokens, n_embd, lw.attn_norm->data(), lw.attn_norm->type, cfg_.rms_norm_eps, h_.data());
  cpu::matmul(h_.data(), n_tokens, n_embd, lw.wq->data(), lw.wq->type, q_dim, lw.bq.empty() ? nullptr : lw.bq.data(),
              q_.data(), pool_);
  cpu::matmul(h_.data(), n_tokens, n_embd, lw.wk->data(), lw.wk->type, kv_dim, lw.bk.empty() ? nullptr : lw.bk.data(),
              k_.data(), pool_);
  cpu::matmul(h_.data(), n_tokens, n_embd, lw.wv->data(), lw.wv->type, kv_dim, lw.bv.empty() ? nullptr : lw.bv.data(),
              v_.data(), pool_);
  if (lw.q_norm != nullptr)
    cpu::rms_norm(q_.data(), n_tokens * n_head_, hd, lw.q_norm->data(), lw.q_norm->type, cfg_.rms_norm_eps, q_.data());
  if (lw.k_norm != nullptr)
    cpu::rms_norm(k_.data(), n_tokens * n_head_kv_, hd, lw.k_norm->data(), lw.k_norm->type, cfg_.rms_norm_eps,
                  k_.data());
  cpu::apply_rope(inv_freq_.data(), hd, batch.positions.data(), n_tokens, q_.data(), n_head_, k_.data(), n_head_kv_);

  cpu::paged_kv_view view = cache.layer(local_layer);
  cpu::write_kv(view, k_.data(), v_.data(), slots_.data(), n_tokens);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  cpu::paged_attention(q_.data(), batch.positions.data(), seqs_.data(), static_cast<int64_t>(seqs_.size()), view,
                       n_head_, scale, attn_.data(), pool_);

  cpu::matmul(attn_.data(), n_tokens, q_dim, lw.wo->data(), lw.wo->type, n_embd, nullptr, proj_.data(), pool_);
  if (comm_.size() > 1)
    comm_.all_reduce_sum(proj_.data(), n_tokens * n_embd);
  if (!lw.bo.empty())  // replicated: added once, after the partial sums are combined
    for (int64_t t = 0; t < n_tokens; ++t)
      cpu::add_inplace(proj_.data() + t * n_embd, lw.bo.data(), n_embd);
  cpu::add_inplace(x_.data(), proj_.data(), n_tokens * n_embd);
}

void llama_model::feed_forward_block(const layer_weights& lw, int64_t n_tokens) {
  const int64_t n_embd = cfg_.n_embd;
  grow(gate_, n_tokens * n_ff_);
  grow(up_, n_tokens * n_ff_);
  cpu::rms_norm(x_.data(), n_tokens, n_embd, lw.ffn_norm->data(), lw.ffn_norm->type, cfg_.rms_norm_eps, h_.data());
  cpu::matmul(h_.data(), n_tokens, n_embd, lw.w_gate->data(), lw.w_gate->type, n_ff_, nullptr, gate_.data(), pool_);
  cpu::matmul(h_.data(), n_tokens, n_embd, lw.w_up->data(), lw.w_up->type, n_ff_, nullptr, up_.data(), pool_);
  cpu::silu_mul(gate_.data(), up_.data(), n_tokens * n_ff_, gate_.data());
  cpu::matmul(gate_.data(), n_tokens, n_ff_, lw.w_down->data(), lw.w_down->type, n_embd, nullptr, proj_.data(), pool_);
  if (comm_.size() > 1)
    comm_.all_reduce_sum(proj_.data(), n_tokens * n_embd);
  cpu::add_inplace(x_.data(), proj_.data(), n_tokens * n_embd);
}

std::vector<float> llama_model::output_logits(const forward_batch& batch) {
  const int64_t n_embd = cfg_.n_embd;
  const int64_t n_sample = static_cast<int64_t>(batch.sample_rows.size());
  if (n_sample == 0)
    return {};
  // Only the sampled rows go through the final norm and the (large) vocabulary projection.
  grow(h_, n_sample * n_embd);
  for (int64_t i = 0; i < n_sample; ++i)
    std::memcpy(h_.data() + i * n_embd, x_.data() + batch.sample_rows[static_cast<size_t>(i)] * n_embd,
                static_cast<size_t>(n_embd) * sizeof(float));
  cpu::rms_norm(h_.data(), n_sample, n_embd, final_norm_->data(), final_norm_->type, cfg_.rms_norm_eps, h_.data());

  const int64_t n_vocab = cfg_.n_vocab;
  const int64_t rows = lm_head_->shape[0];
  if (comm_.size() == 1) {
    std::vector<float> logits(static_cast<size_t>(n_sample * n_vocab));
    cpu::matmul(h_.data(), n_sample, n_embd, lm_head_->data(), lm_head_->type, rows, nullptr, logits.data(), pool_);
    return logits;
  }
  // Vocab-parallel: each rank computes its slice of columns, padded to the common chunk, then all ranks gather.
  const int64_t chunk = (n_vocab + comm_.size() - 1) / comm_.size();
  std::vector<float> local(static_cast<size_t>(n_sample * chunk), 0.0f);
  std::vector<float> part(static_cast<size_t>(n_sample * rows));
  cpu::matmul(h_.data(), n_sample, n_embd, lm_head_->data(), lm_head_->type, rows, nullptr, part.data(), pool_);
  for (int64_t i = 0; i < n_sample; ++i)
    std::memcpy(local.data() + i * chunk, part.data() + i * rows, static_cast<size_t>(rows) * sizeof(float));
  std::vector<float> gathered(static_cast<size_t>(n_sample * chunk * comm_.size()));
  comm_.all_gather(local.data(), n_sample * chunk, gathered.data());
  std::vector<float> logits(static_cast<size_t>(n_sample * n_vocab));
  for (int r = 0; r < comm_.size(); ++r) {
    int64_t begin = r * chunk;
    int64_t count = std::min(chunk, n_vocab - begin);
    for (int64_t i = 0; i < n_sample && count > 0; ++i)
      std::memcpy(logits.data() + i * n_vocab + begin, gathered.data() + (r * n_sample + i) * chunk,
                  static_cast<size_t>(count) * sizeof(float));
  }
  return logits;
}

}  // namespace actorllm::model
