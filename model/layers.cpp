// The shared building blocks of the forward pass.
#include "model/layers.hpp"

#include "model/lora_adapter.hpp"

#include "util/check.hpp"

#include <algorithm>
#include <array>
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

/// Attention under context parallelism: the ranks of a context-parallel group (the DCP group's D ranks, which hold
/// one kv head, in each of the P copies of the TP group) keep shares of every sequence's keys. Every rank attends
/// every row's queries of its DCP group's heads over its own keys, keeping each (row, head)'s log-sum-exp; the
/// partial results are exchanged and each rank merges those of its own heads and rows exactly. The exchanges are
/// all-gathers over the shard's whole collective (each rank takes its group's part), so every transport serves them.
/// q: this copy's rows [c, nh, hd], RoPE applied; the cache holds this step's keys already.
void context_parallel_attention(const layer_context& ctx, const tensor& q, const kv_layer& cache, float scale,
                                int64_t window, const layer_scratch& s) {
  backend& be = ctx.be;
  const int64_t n = ctx.in.n_tokens, c = ctx.in.local_rows, hd = ctx.head_dim, nh = ctx.n_head;
  const int64_t d_size = ctx.dcp_size, p_size = ctx.pcp_size, tp = ctx.tp_size;
  const int64_t q_dim = nh * hd;
  const int64_t tp_rank = ctx.comm.rank() % tp;
  const int64_t dcp_first = tp_rank / d_size * d_size;  // the DCP group's first TP rank
  const cp_scratch& b = s.cp;
  ctx.comm.all_gather(q.reshape({c, q_dim}), b.q_ranks);
  for (int64_t p = 0; p < p_size; ++p) {
    const int64_t rows = std::min(c, n - p * c);  // copy p's real rows
    for (int64_t d = 0; rows > 0 && d < d_size; ++d)
      be.copy_columns(b.q_ranks.slice_rows((p * tp + dcp_first + d) * c, rows), 0, b.q_group.slice_rows(p * c, rows),
                      d * q_dim, q_dim);
  }
  be.paged_attention_partial(b.q_group.reshape({n, d_size * nh, hd}), ctx.in.attn, cache, scale, window,
                             b.out.reshape({n, d_size * nh, hd}), b.lse);
  ctx.comm.all_gather(b.out, b.out_ranks);
  ctx.comm.all_gather(b.lse, b.lse_ranks);
  // The group's parts: ranks (p, dcp_first + d), contiguous over d.
  tensor parts = b.out_ranks.slice_rows(dcp_first * n, d_size * n);
  tensor lses = b.lse_ranks.slice_rows(dcp_first * n, d_size * n);
  if (p_size > 1) {
    for (int64_t p = 0; p < p_size; ++p) {
      be.copy(b.out_ranks.slice_rows((p * tp + dcp_first) * n, d_size * n),
              b.parts.slice_rows(p * d_size * n, d_size * n));
      be.copy(b.lse_ranks.slice_rows((p * tp + dcp_first) * n, d_size * n),
              b.part_lses.slice_rows(p * d_size * n, d_size * n));
    }
    parts = b.parts;
    lses = b.part_lses;
  }
  const int64_t head_begin = (tp_rank - dcp_first) * nh;
  if (p_size == 1) {
    be.merge_attention_partials(parts, lses, d_size, head_begin, s.attn.reshape({n, nh, hd}));
    return;
  }
  be.merge_attention_partials(parts, lses, p_size * d_size, head_begin, b.attn_full.reshape({n, nh, hd}));
  if (ctx.in.local_count > 0)
    be.copy(b.attn_full.slice_rows(ctx.in.local_begin, ctx.in.local_count), s.attn.slice_rows(0, ctx.in.local_count));
}

/// Under prefill context parallelism, the keys or values of every row of the step: each copy's rows from the rank of
/// the same TP rank in that copy (which holds the same kv heads).
void gather_rows_of_copies(const layer_context& ctx, const tensor& local, const tensor& full, const cp_scratch& b) {
  const int64_t n = ctx.in.n_tokens, c = ctx.in.local_rows, tp = ctx.tp_size;
  const int64_t tp_rank = ctx.comm.rank() % tp;
  ctx.comm.all_gather(local, b.kv_ranks);
  for (int64_t p = 0; p < ctx.pcp_size; ++p) {
    const int64_t rows = std::min(c, n - p * c);
    if (rows > 0)
      ctx.be.copy(b.kv_ranks.slice_rows((p * tp + tp_rank) * c, rows), full.slice_rows(p * c, rows));
  }
}

}  // namespace

void project_stacked(backend& be, const stacked_linear& w, const tensor& x, const layer_scratch& s,
                     std::span<const tensor> apart, std::span<tensor> out) {
  const int64_t n = x.rows();
  ACTORLLM_CHECK(std::ssize(apart) == w.n_parts && std::ssize(out) == w.n_parts,
                 "project_stacked: one output per part of the stack");
  if (!w.is_merged()) {
    std::array<linear_out, stacked_linear::max_parts> outs;
    for (int i = 0; i < w.n_parts; ++i) {
      const auto p = static_cast<size_t>(i);
      outs[p] = {w.parts[p], w.part_biases[p], apart[p]};
      out[p] = apart[p];
    }
    be.matmul_group(x, std::span{outs.data(), static_cast<size_t>(w.n_parts)});
    return;
  }
  const int64_t total = w.total_rows();
  const tensor wide = s.stacked.slice_rows(0, n * total);
  be.matmul(x, w.merged, w.bias, wide.reshape({n, total}));
  for (int i = 0; i < w.n_parts; ++i) {
    const auto p = static_cast<size_t>(i);
    out[p] = n == 1 ? wide.slice_rows(w.offset(i), w.rows[p]).reshape({1, w.rows[p]}) : apart[p];
  }
  if (n > 1)
    be.split_columns(wide.reshape({n, total}), apart);
}

void swiglu_stacked(backend& be, const stacked_linear& gate_up, const tensor& x, const tensor& wide, const tensor& up,
                    const tensor& out) {
  if (gate_up.is_merged()) {
    be.matmul_silu_stacked(x, gate_up.merged, wide, out);
  } else {
    be.matmul_silu_gate(x, gate_up.parts[0], gate_up.parts[1], up, out);
  }
}

void attention(const layer_context& ctx, const layer_weights& w, const kv_layer& cache, int64_t window,
               layer_scratch& s) {
  backend& be = ctx.be;
  const int64_t n = ctx.in.local_rows;  // this copy's rows (every row without prefill context parallelism)
  const int64_t hd = ctx.head_dim;
  const tensor apart[] = {s.q, s.k, s.v};
  std::array<tensor, 3> qkv;  // q, k, v: [n, heads * hd] each
  project_stacked(be, w.qkv, s.h, s, apart, qkv);
  lora_update(ctx, stack(w, lora_target::q), s.h, qkv[0], s);
  lora_update(ctx, stack(w, lora_target::k), s.h, qkv[1], s);
  lora_update(ctx, stack(w, lora_target::v), s.h, qkv[2], s);
  const tensor q = qkv[0].reshape({n, ctx.n_head, hd});
  const tensor k = qkv[1].reshape({n, ctx.n_head_kv, hd});
  const tensor v = qkv[2].reshape({n, ctx.n_head_kv, hd});
  if (ctx.pcp_size > 1) {  // every row's keys and values, for the rows' cache slots
    be.rope(ctx.rope, ctx.in.local_positions, q, k, w.q_norm, w.k_norm, ctx.norm_eps);
    const int64_t rows = ctx.in.n_tokens;
    gather_rows_of_copies(ctx, qkv[1], s.cp.k_full, s.cp);
    gather_rows_of_copies(ctx, qkv[2], s.cp.v_full, s.cp);
    be.write_kv(cache, s.cp.k_full.slice_rows(0, rows).reshape({rows, ctx.n_head_kv, hd}),
                s.cp.v_full.slice_rows(0, rows).reshape({rows, ctx.n_head_kv, hd}), ctx.in.attn);
  }
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  if (ctx.pcp_size == 1 && ctx.dcp_size == 1) {
    be.rope_write_kv_attention(ctx.rope, ctx.in.local_positions, q, k, w.q_norm, w.k_norm, ctx.norm_eps, cache, v,
                               ctx.in.attn, scale, window, s.attn.reshape({n, ctx.n_head, hd}));
  } else {
    if (ctx.pcp_size == 1)
      be.rope_write_kv(ctx.rope, ctx.in.local_positions, q, k, w.q_norm, w.k_norm, ctx.norm_eps, cache, v, ctx.in.attn);
    context_parallel_attention(ctx, q, cache, scale, window, s);
  }
  be.matmul(s.attn, w.wo, tensor{}, s.proj);
  lora_update(ctx, stack(w, lora_target::o), s.attn, s.proj, s);
  tp_all_reduce(ctx, s.proj, s);
  if (!w.bo.empty())  // replicated: added once, after the partial sums are combined
    be.add(s.proj, w.bo, s.proj);
}

void ffn(const layer_context& ctx, const layer_weights& w, layer_scratch& s) {
  backend& be = ctx.be;
  // With LoRA on, gate and up always run apart from their SiLU, adapted rows or not, so that a base-model row gets
  // the same numbers whatever else shares its step.
  if (!stack(w, lora_target::gate).empty() || !stack(w, lora_target::up).empty()) {
    const tensor apart[] = {s.gate, s.up};
    std::array<tensor, 2> gate_up;
    project_stacked(be, w.gate_up, s.h, s, apart, gate_up);
    lora_update(ctx, stack(w, lora_target::gate), s.h, gate_up[0], s);
    lora_update(ctx, stack(w, lora_target::up), s.h, gate_up[1], s);
    be.silu_mul(gate_up[0], gate_up[1], s.gate);
  } else {
    const int64_t n = s.h.rows();
    swiglu_stacked(be, w.gate_up, s.h,
                   s.stacked.slice_rows(0, n * w.gate_up.total_rows()).reshape({n, w.gate_up.total_rows()}), s.up,
                   s.gate);
  }
  be.matmul(s.gate, w.w_down, tensor{}, s.proj);
  lora_update(ctx, stack(w, lora_target::down), s.gate, s.proj, s);
  tp_all_reduce(ctx, s.proj, s);
}

void tp_all_reduce(const layer_context& ctx, const tensor& t, const layer_scratch& s) {
  if (ctx.tp_size == 1)
    return;
  if (ctx.pcp_size == 1) {
    ctx.comm.all_reduce_sum(t);
    return;
  }
  const int64_t rows = t.rows(), first = ctx.comm.rank() / ctx.tp_size * ctx.tp_size;
  const tensor gathered = s.cp.reduce.slice_rows(0, ctx.comm.size() * rows);  // [G * rows, n_embd]
  ctx.comm.all_gather(t, gathered);
  ctx.be.copy(gathered.slice_rows(first * rows, rows), t);
  for (int64_t r = 1; r < ctx.tp_size; ++r)
    ctx.be.add(t, gathered.slice_rows((first + r) * rows, rows), t);
}

}  // namespace actorllm::model
