// The shared building blocks of the forward pass.
#include "model/layers.hpp"

#include <cmath>

namespace actorllm::model {

void attention(const layer_context& ctx, const layer_weights& w, const kv_layer& cache, int64_t window,
               layer_scratch& s) {
  backend& be = ctx.be;
  const int64_t n = ctx.in.n_tokens;
  const int64_t hd = ctx.head_dim;
  const linear_out qkv[] = {{w.wq, w.bq, s.q}, {w.wk, w.bk, s.k}, {w.wv, w.bv, s.v}};
  be.matmul_group(s.h, qkv);
  const tensor q = s.q.reshape({n, ctx.n_head, hd});
  const tensor k = s.k.reshape({n, ctx.n_head_kv, hd});
  const tensor v = s.v.reshape({n, ctx.n_head_kv, hd});
  be.rope(ctx.rope, ctx.in.attn.positions, q, k, w.q_norm, w.k_norm, ctx.norm_eps);
  be.write_kv(cache, k, v, ctx.in.attn);
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  be.paged_attention(q, ctx.in.attn, cache, scale, window, s.attn.reshape({n, ctx.n_head, hd}));
  be.matmul(s.attn, w.wo, tensor{}, s.proj);
  if (ctx.comm.size() > 1)
    ctx.comm.all_reduce_sum(s.proj);
  if (!w.bo.empty())  // replicated: added once, after the partial sums are combined
    be.add(s.proj, w.bo, s.proj);
}

void ffn(const layer_context& ctx, const layer_weights& w, layer_scratch& s) {
  backend& be = ctx.be;
  be.matmul_silu_gate(s.h, w.w_gate, w.w_up, s.up, s.gate);
  be.matmul(s.gate, w.w_down, tensor{}, s.proj);
  if (ctx.comm.size() > 1)
    ctx.comm.all_reduce_sum(s.proj);
}

}  // namespace actorllm::model
