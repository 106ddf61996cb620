// The mixture-of-experts MLP block (llama.cpp's build_moe_ffn, vLLM's FusedMoE) as a shared helper over the backend
// interface: router logits, softmax and top-k as transformers computes them, the experts' SwiGLU MLPs over only the
// tokens routed to each (grouped: one gather, then one matmul per expert over its rows), the weighted sum, and
// Qwen2-MoE's shared expert. Tensor parallel: every expert's intermediate rows split over the TP ranks, the partial
// sums combined by the layer's all-reduce. Expert parallel: whole experts on the ranks of the EP group; tokens are
// dispatched to the ranks holding their experts and the outputs combined back with the collective's all-to-all.
#pragma once

#include "comm/collective.hpp"
#include "kernels/backend.hpp"
#include "model/expert_balancer.hpp"
#include "model/layers.hpp"
#include "model/model_config.hpp"
#include "model/moe_weights.hpp"
#include "model/weight_table.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace actorllm::model {

/// Top-k routing of one batch, as transformers' Mixtral/Qwen2-MoE/Qwen3-MoE blocks compute it: softmax in f32 over
/// each row of `logits` ([n_tokens, n_expert]), the k largest probabilities (ties: the lower expert id first, as
/// torch.topk returns them), divided by their sum when `renormalise`. Writes k expert ids and weights per token,
/// highest first.
void route_top_k(std::span<const float> logits, int64_t n_expert, int64_t k, bool renormalise,
                 std::span<int32_t> expert_ids, std::span<float> weights);

/// How a shard runs its MoE layers, and what it counts: the state of the helper across steps (scratch buffers, the
/// expert load statistics).
class moe_block {
 public:
  /// `ep_comm` is the expert-parallel group when shard.expert_parallel: shard.ep_size() ranks, the TP group itself
  /// with one replica, every replica's TP ranks with lockstep data-parallel replicas (rank shard.ep_rank()); unused
  /// otherwise. Must outlive the block.
  /// With shard.eplb on (expert parallel over more than one rank), `layers` are the shard's MoE layers, whose
  /// expert slots the balancer moves (model/expert_balancer); unused otherwise.
  moe_block(const model_config& cfg, const shard_spec& shard, tp_collective& ep_comm,
            std::vector<expert_balancer::layer_ref> layers = {});

  /// The MoE block of global layer `layer`: reads s.h, writes s.proj (complete on every TP rank, like ffn()).
  void forward(const layer_context& ctx, int64_t layer, const moe_weights& w, layer_scratch& s);

  /// The MoE block of a step with no tokens on this replica (lockstep expert parallelism: another replica's step
  /// runs): the dispatch and combine alone, so that this rank's experts serve the rows the other replicas route to
  /// them. Every rank of the EP group runs each MoE layer's exchange once per step, idle or not.
  void forward_idle(backend& be, int64_t layer, const moe_weights& w);

  /// After every step of the shard, busy or idle (every rank of the EP group calls it once per step): expert-parallel
  /// load balancing's window advances, and every step_interval steps its rearrangement runs. Nothing without EPLB.
  void end_step(backend& be);
  /// The balancer, or null without EPLB.
  const expert_balancer* balancer() const { return balancer_.get(); }

  /// Tokens routed to each expert so far (each token counts once per expert it picked), summed over the shard's
  /// MoE layers: size n_expert. Every rank of a replica counts the same routing.
  const std::vector<uint64_t>& expert_load() const { return load_; }
  /// What the EP group's all-to-all moved for this rank so far.
  exchange_stats exchange() const { return ep_comm_.exchange_statistics(); }

 private:
  /// Expert parallel: sends this rank's share of the n routed tokens (ids_, weights_, hidden rows in host_h_) to
  /// the ranks holding their experts, runs the rows it receives through its own experts, sends them back, and adds
  /// the weighted outputs into acc_.
  void dispatch_and_combine(backend& be, int64_t layer, const moe_weights& w, int64_t n);
  /// y[i] = expert(e_i)(x[rows[i]]) for the local experts, rows grouped by expert: `order` lists indices into
  /// `rows` sorted by expert, `counts[e]` rows of local expert e. x is [*, n_embd] on the backend; returns y
  /// [rows.size(), n_embd] downloaded to the host, in `order`'s order.
  void run_experts(backend& be, const moe_weights& w, const tensor& x, std::span<const int32_t> rows,
                   std::span<const int64_t> counts, std::vector<float>& y);
  /// The shared expert's sigmoid-gated output added to acc (this rank's TP part of it).
  void add_shared_expert(const layer_context& ctx, const moe_weights& w, const layer_scratch& s,
                         std::vector<float>& acc);
  /// A view [rows, cols] of `buf`, which grows to hold it.
  tensor scratch(backend& be, tensor& buf, dtype type, int64_t rows, int64_t cols);

  model_config cfg_;
  shard_spec shard_;
  tp_collective& ep_comm_;
  int64_t n_physical_ = 0;  // expert slots over the EP group (the experts, plus EPLB's redundant ones)
  std::unique_ptr<expert_balancer> balancer_;
  std::vector<uint64_t> load_;
  // Scratch on the backend, reused across layers and steps.
  tensor logits_, rows_, xg_, gate_, up_, gate_up_, y_, sh_gate_, sh_up_, sh_gate_up_, sh_out_, sh_logit_, xr_;
  // Host scratch.
  std::vector<float> host_logits_, host_y_, acc_, host_h_, send_, recv_, back_, ret_, sh_host_, sh_logit_host_;
  std::vector<int32_t> ids_;
  std::vector<float> weights_;
};

}  // namespace actorllm::model
