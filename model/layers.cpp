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
