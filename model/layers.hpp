// The building blocks every architecture's forward pass is assembled from (llama.cpp's build_norm / build_attn /
// build_ffn): free functions over a backend, a TP group and one layer's bound weights. A new architecture reuses
// them (MoE adds moe_ffn beside ffn) instead of copying a forward pass.
#pragma once

#include "comm/collective.hpp"
#include "kernels/backend.hpp"
#include "model/layer_weights.hpp"
#include "model/step_inputs.hpp"

#include <cstdint>
#include <span>

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
  /// Context parallelism (shard_spec): the TP ranks [g * dcp_size, (g + 1) * dcp_size), which hold one kv head,
  /// and the pcp_size copies of the TP group keep shares of every sequence's cache (the step's attention_batch says
  /// which positions are here). `comm` then spans the copies (tp_size × pcp_size ranks, copy-major), each copy
  /// runs the step's rows ctx.in.local_* through its dense layers, and attention() runs over the whole group.
  int64_t dcp_size = 1;
  int64_t pcp_size = 1;
  int64_t tp_size = 1;  ///< the TP group's ranks (comm.size() / pcp_size)
};

/// The buffers of context parallel attention (empty without it). G = the collective's ranks (tp × pcp), D =
/// dcp_size, P = pcp_size, nh = the rank's query heads, n = the step's rows, c = the rows of each copy.
struct cp_scratch {
  tensor q_ranks;               ///< [G * c, nh * head_dim]: every rank's queries
  tensor q_group;               ///< [n, D * nh * head_dim]: the DCP group's queries of every row, heads side by side
  tensor out, lse;              ///< [n, D * nh * head_dim], [n, D * nh]: this rank's partial attention
  tensor out_ranks, lse_ranks;  ///< [G * n, ...]: every rank's partial results
  tensor parts, part_lses;      ///< [P * D * n, ...]: this rank's context-parallel group's, back to back (P > 1)
  tensor attn_full;             ///< [n, nh * head_dim]: the merged attention of every row (P > 1)
  tensor kv_ranks;              ///< [G * c, n_head_kv * head_dim]: every rank's new keys, then values (P > 1)
  tensor k_full, v_full;        ///< [P * c, n_head_kv * head_dim]: the step's keys and values of every row (P > 1)
  tensor reduce;                ///< [G * c, n_embd]: the all-gather a TP sum is taken from (P > 1)
};

/// Scratch activations of one step, each a view of n_tokens rows.
struct layer_scratch {
  tensor h;     ///< [n, n_embd]: the normalised input of a block (llama_model::normed_input_type)
  tensor q;     ///< [n, n_head * head_dim]
  tensor k, v;  ///< [n, n_head_kv * head_dim]
  tensor attn;  ///< [n, n_head * head_dim]
  tensor proj;  ///< [n, n_embd]: a block's output (all-reduced), added to the residual by the next norm
  /// [n, n_ff]: SiLU×mul's product, in the type w_down reads where matmul_silu_gate writes it (llama_model::scratch)
  tensor gate;
  tensor up;  ///< [n, n_ff], only with LoRA or a gate|up bound apart (else empty)
  /// 1-D, at least n * max(q|k|v's, gate|up's rows): a stacked projection's output, viewed as [n, its rows] (one at
  /// a time: attention's q|k|v, then the MLP's gate|up).
  tensor stacked;
  tensor lora_shrunk;  ///< [n, max_lora_rank]: lora_add's scratch (only with LoRA)
  cp_scratch cp;       ///< context parallel attention's buffers (only with it)
};

/// The outputs of a stacked Linear (model/stacked_linear.hpp) over x's n rows: one GEMM into s.stacked viewed as
/// [n, w.total_rows()], then part i's columns in out[i]. With one row the parts' columns are contiguous already and
/// out[i] is a view of them (no copy); with more they are copied into apart[i] ([n, rows[i]] each; one split_columns,
/// n * total_rows floats, small beside the GEMM: RoPE, the cache write and LoRA read contiguous rows). Parts bound
/// apart run as one matmul_group into apart[i].
void project_stacked(backend& be, const stacked_linear& w, const tensor& x, const layer_scratch& s,
                     std::span<const tensor> apart, std::span<tensor> out);

/// The SwiGLU up-projection through a stacked gate|up: out = silu(x gate^T) * (x up^T) ([n, n_ff]). Stacked:
/// backend::matmul_silu_stacked with `wide` ([n, 2 * n_ff] scratch); apart: matmul_silu_gate with `up` ([n, n_ff]
/// scratch).
void swiglu_stacked(backend& be, const stacked_linear& gate_up, const tensor& x, const tensor& wide, const tensor& up,
                    const tensor& out);

/// Self-attention of one layer: q/k/v projections (+ biases), q/k norm and RoPE, the cache write, paged attention
/// (within `window` positions when > 0), o_proj, the TP all-reduce and o_proj's bias. Reads s.h, writes s.proj.
void attention(const layer_context& ctx, const layer_weights& w, const kv_layer& cache, int64_t window,
               layer_scratch& s);

/// The TP group's sum of t ([rows, cols] f32, in place): the collective's all-reduce, or under prefill context
/// parallelism (the collective spans every copy of the TP group) an all-gather into s.cp.reduce from which each copy
/// sums its own TP group's parts in rank order. Nothing with one TP rank.
void tp_all_reduce(const layer_context& ctx, const tensor& t, const layer_scratch& s);

/// The SwiGLU feed-forward block: down(silu(gate(h)) * up(h)) and the TP all-reduce. Reads s.h, writes s.proj.
/// With LoRA rows in the step, every adapted projection adds its rows' low-rank updates (backend::lora_add) before
/// what follows it reads it: after q/k/v, o_proj and down_proj (before the all-reduce, which sums the row-parallel
/// ranks' partial updates), gate and up (computed apart from their SiLU whenever LoRA is on).
void ffn(const layer_context& ctx, const layer_weights& w, layer_scratch& s);

}  // namespace actorllm::model
