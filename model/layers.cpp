// The shared building blocks of the forward pass.
#include "model/layers.hpp"

#include "model/lora_adapter.hpp"

#include <cmath>

namespace actorllm::model {

namespace {

/// y += the LoRA update of the step's adapted rows for one Linear (nothing without LoRA rows or an adapter stack).
void lora_update(const layer_context& ctx, const lora_stack& stack, const tensor& x, const tensor& y,
                 const layer_scratch& s) {
  if (!ctx.in.lora || stack.empty())
    return;
  ctx.be.lora_add(x, stack.a, stack.b, ctx.in.lora_slots, s.lora_shrunk, y);
}

const lora_stack& stack(const layer_weights& w, lora_target t) { return w.lora[static_cast<size_t>(t)]; }

/// Attention under decode context parallelism (vLLM's DCP): the ranks of a DCP group hold the same kv head, each
/// the keys of its share of the positions. Every rank attends all of the group's query heads over its own keys,
/// keeping each (row, head)'s log-sum-exp; the partial results are exchanged and each rank merges those of its own
/// heads exactly. The exchanges are all-gathers over the whole TP group (each rank takes its group's part).
void dcp_attention(const layer_context& ctx, const tensor& q, const kv_layer& cache, float scale, int64_t window,
                   const layer_scratch& s) {
  backend& be = ctx.be;
  const int64_t n = ctx.in.n_tokens, hd = ctx.head_dim, nh = ctx.n_head, d_size = ctx.dcp_size;
  const int64_t q_dim = nh * hd;
  const int64_t group_first = ctx.comm.rank() / d_size * d_size;  // the group's first TP rank
  ctx.comm.all_gather(q.reshape({n, q_dim}), s.dcp.q_ranks);
  for (int64_t d = 0; d < d_size; ++d)
    be.copy_columns(s.dcp.q_ranks.slice_rows((group_first + d) * n, n), 0, s.dcp.q_group, d * q_dim, q_dim);
  be.paged_attention_partial(s.dcp.q_group.reshape({n, d_size * nh, hd}), ctx.in.attn, cache, scale, window,
                             s.dcp.out.reshape({n, d_size * nh, hd}), s.dcp.lse);
  ctx.comm.all_gather(s.dcp.out, s.dcp.out_ranks);
  ctx.comm.all_gather(s.dcp.lse, s.dcp.lse_ranks);
  be.merge_attention_partials(s.dcp.out_ranks.slice_rows(group_first * n, d_size * n),
                              s.dcp.lse_ranks.slice_rows(group_first * n, d_size * n), d_size,
                              ctx.comm.rank() % d_size * nh, s.attn.reshape({n, nh, hd}));
}

}  // namespace

void attention(const layer_context& ctx, const layer_weights& w, const kv_layer& cache, int64_t window,
               layer_scratch& s) {
  backend& be = ctx.be;
  const int64_t n = ctx.in.n_tokens;
  const int64_t hd = ctx.head_dim;
  const linear_out qkv[] = {{w.wq, w.bq, s.q}, {w.wk, w.bk, s.k}, {w.wv, w.bv, s.v}};
  be.matmul_group(s.h, qkv);
  lora_update(ctx, stack(w, lora_target::q), s.h, s.q, s);
  lora_update(ctx, stack(w, lora_target::k), s.h, s.k, s);
  lora_update(ctx, stack(w, lora_target::v), s.h, s.v, s);
  const tensor q = s.q.reshape({n, ctx.n_head, hd});
  const tensor k = s.k.reshape({n, ctx.n_head_kv, hd});
  const tensor v = s.v.reshape({n, ctx.n_head_kv, hd});
  be.rope(ctx.rope, ctx.in.attn.positions, q, k, w.q_norm, w.k_norm, ctx.norm_eps);
  be.write_kv(cache, k, v, ctx.in.attn);
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  if (ctx.dcp_size > 1)
    dcp_attention(ctx, q, cache, scale, window, s);
  else
    be.paged_attention(q, ctx.in.attn, cache, scale, window, s.attn.reshape({n, ctx.n_head, hd}));
  be.matmul(s.attn, w.wo, tensor{}, s.proj);
  lora_update(ctx, stack(w, lora_target::o), s.attn, s.proj, s);
  if (ctx.comm.size() > 1)
    ctx.comm.all_reduce_sum(s.proj);
  if (!w.bo.empty())  // replicated: added once, after the partial sums are combined
    be.add(s.proj, w.bo, s.proj);
}

void ffn(const layer_context& ctx, const layer_weights& w, layer_scratch& s) {
  backend& be = ctx.be;
  // With LoRA on, gate and up always run apart from their SiLU, adapted rows or not, so that a base-model row gets
  // the same numbers whatever else shares its step.
  if (!stack(w, lora_target::gate).empty() || !stack(w, lora_target::up).empty()) {
    be.matmul(s.h, w.w_gate, tensor{}, s.gate);
    be.matmul(s.h, w.w_up, tensor{}, s.up);
    lora_update(ctx, stack(w, lora_target::gate), s.h, s.gate, s);
    lora_update(ctx, stack(w, lora_target::up), s.h, s.up, s);
    be.silu_mul(s.gate, s.up, s.gate);
  } else {
    be.matmul_silu_gate(s.h, w.w_gate, w.w_up, s.up, s.gate);
  }
  be.matmul(s.gate, w.w_down, tensor{}, s.proj);
  lora_update(ctx, stack(w, lora_target::down), s.gate, s.proj, s);
  if (ctx.comm.size() > 1)
    ctx.comm.all_reduce_sum(s.proj);
}

}  // namespace actorllm::model
