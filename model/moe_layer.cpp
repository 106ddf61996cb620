// The mixture-of-experts block over the backend interface. Routing runs on the host (a few floats per token: the
// grouping decides the shapes of the expert matmuls, so the host needs it anyway); the experts' matmuls, the
// gather of their rows and the activation run on the backend.
#include "model/moe_layer.hpp"

#include "model/model_error.hpp"
#include "util/check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace actorllm::model {

void route_top_k(std::span<const float> logits, int64_t n_expert, int64_t k, bool renormalise,
                 std::span<int32_t> expert_ids, std::span<float> weights) {
  ACTORLLM_CHECK(n_expert > 0 && k > 0 && k <= n_expert, "route_top_k: k must be in [1, n_expert]");
  const auto n_tokens = static_cast<int64_t>(logits.size()) / n_expert;
  ACTORLLM_CHECK(static_cast<int64_t>(logits.size()) == n_tokens * n_expert, "route_top_k: ragged logits");
  ACTORLLM_CHECK(
      static_cast<int64_t>(expert_ids.size()) == n_tokens * k && static_cast<int64_t>(weights.size()) == n_tokens * k,
      "route_top_k: k outputs per token");
  std::vector<float> prob(static_cast<size_t>(n_expert));
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = logits.data() + t * n_expert;
    const float max = *std::max_element(row, row + n_expert);
    float sum = 0.0f;
    for (int64_t e = 0; e < n_expert; ++e)
      sum += prob[static_cast<size_t>(e)] = std::exp(row[e] - max);
    for (float& p : prob)
      p /= sum;
    std::iota(order.begin(), order.end(), 0);
    // torch.topk: largest first; among equal values the lower index first.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float pa = prob[static_cast<size_t>(a)];
      const float pb = prob[static_cast<size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    });
    float top_sum = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      top_sum += prob[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      expert_ids[static_cast<size_t>(t * k + j)] = e;
      const float p = prob[static_cast<size_t>(e)];
      weights[static_cast<size_t>(t * k + j)] = renormalise ? p / top_sum : p;
    }
  }
}

moe_block::moe_block(const model_config& cfg, const shard_spec& shard, tp_collective& ep_comm,
                     std::vector<expert_balancer::layer_ref> layers)
    : cfg_(cfg),
      shard_(shard),
      ep_comm_(ep_comm),
      n_physical_(shard.n_physical_experts(cfg.n_expert)),
      load_(static_cast<size_t>(cfg.n_expert), 0) {
  if (shard_.expert_parallel && ep_comm_.size() != shard_.ep_size())
    throw model_error(fmt::format("the expert-parallel group has {} ranks but the shard was placed for {}",
                                  ep_comm_.size(), shard_.ep_size()));
  if (shard_.expert_parallel && shard_.eplb.enabled) {
    if (ep_comm_.size() < 2)
      throw model_error("expert-parallel load balancing needs an expert-parallel group of more than one rank");
    balancer_ = std::make_unique<expert_balancer>(cfg, shard, ep_comm, std::move(layers));
  }
}

void moe_block::end_step(backend& be) {
  if (balancer_)
    balancer_->end_step(be);
}

tensor moe_block::scratch(backend& be, tensor& buf, dtype type, int64_t rows, int64_t cols) {
  rows = std::max<int64_t>(rows, 1);
  if (buf.empty() || buf.dim(0) < rows || buf.dim(1) != cols)
    buf = be.alloc(type, {std::max(rows, buf.empty() ? rows : 2 * buf.dim(0)), cols});
  return buf.slice_rows(0, rows);
}

void moe_block::run_experts(backend& be, const moe_weights& w, const tensor& x, std::span<const int32_t> rows,
                            std::span<const int64_t> counts, std::vector<float>& y) {
  const auto m = static_cast<int64_t>(rows.size());
  const int64_t d = cfg_.n_embd;
  y.resize(static_cast<size_t>(m * d));
  if (m == 0)
    return;
  const int64_t ff = w.experts.front().gate_up.rows[0];
  const tensor idx = scratch(be, rows_, dtype::i32, m, 1).reshape({m});
  be.upload(idx, rows.data(), static_cast<size_t>(m) * sizeof(int32_t));
  const tensor xg = scratch(be, xg_, dtype::f32, m, d);
  be.gather_rows(x, idx, xg);
  const tensor gate = scratch(be, gate_, dtype::f32, m, ff);
  const tensor up = scratch(be, up_, dtype::f32, m, ff);
  const tensor gate_up = scratch(be, gate_up_, dtype::f32, m, 2 * ff);
  const tensor out = scratch(be, y_, dtype::f32, m, d);
  int64_t offset = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (const int64_t c = counts[e]; c > 0) {
      swiglu_stacked(be, w.experts[e].gate_up, xg.slice_rows(offset, c), gate_up.slice_rows(offset, c),
                     up.slice_rows(offset, c), gate.slice_rows(offset, c));
      offset += c;
    }
  }
  offset = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (const int64_t c = counts[e]; c > 0) {
      be.matmul(gate.slice_rows(offset, c), w.experts[e].w_down, tensor{}, out.slice_rows(offset, c));
      offset += c;
    }
  }
  be.download(out, y.data(), y.size() * sizeof(float));
}

void moe_block::add_shared_expert(const layer_context& ctx, const moe_weights& w, const layer_scratch& s,
                                  std::vector<float>& acc) {
  backend& be = ctx.be;
  const int64_t n = ctx.in.n_tokens;
  const int64_t d = cfg_.n_embd;
  const int64_t ff = w.shexp_gate_up.rows[0];
  const tensor g = scratch(be, sh_gate_, dtype::f32, n, ff);
  const tensor u = scratch(be, sh_up_, dtype::f32, n, ff);
  const tensor gu = scratch(be, sh_gate_up_, dtype::f32, n, 2 * ff);
  const tensor o = scratch(be, sh_out_, dtype::f32, n, d);
  const tensor logit = scratch(be, sh_logit_, dtype::f32, n, 1);
  swiglu_stacked(be, w.shexp_gate_up, s.h, gu, u, g);
  be.matmul(g, w.shexp_down, tensor{}, o);
  be.matmul(s.h, w.shexp_router, tensor{}, logit);
  sh_host_.resize(static_cast<size_t>(n * d));
  sh_logit_host_.resize(static_cast<size_t>(n));
  be.download(o, sh_host_.data(), sh_host_.size() * sizeof(float));
  be.download(logit, sh_logit_host_.data(), sh_logit_host_.size() * sizeof(float));
  for (int64_t t = 0; t < n; ++t) {
    // A scalar gate per token, so each TP rank's partial output may be gated before the all-reduce.
    const float gate = 1.0f / (1.0f + std::exp(-sh_logit_host_[static_cast<size_t>(t)]));
    float* a = acc.data() + t * d;
    const float* v = sh_host_.data() + t * d;
    for (int64_t i = 0; i < d; ++i)
      a[i] += gate * v[i];
  }
}

void moe_block::dispatch_and_combine(backend& be, int64_t layer, const moe_weights& w, int64_t n) {
  const int64_t k = cfg_.n_expert_used;
  const int64_t d = cfg_.n_embd;
  const int64_t n_local = static_cast<int64_t>(w.experts.size());
  std::vector<int64_t> counts(static_cast<size_t>(n_local), 0);
  // The TP ranks of a replica hold the same tokens; token t is sent on by TP rank t mod tp (its source), to the EP
  // ranks holding its experts, as [expert id, hidden row]; the outputs come back to the source in the order they
  // were sent, and the layer's TP all-reduce puts every token's sum on every rank. With lockstep replicas the EP
  // group spans them all (ep = dp × tp): a replica with n = 0 tokens still runs its experts for the others' rows.
  // A pair goes to a physical expert slot: the expert's own without EPLB, else one of its replicas, which the
  // balancer picks and counts (the source alone, so the group counts each pair once).
  const int ep = ep_comm_.size();
  const int64_t width = d + 1;
  std::vector<int64_t> send_rows(static_cast<size_t>(ep), 0);
  std::vector<int32_t> dest_of_pair(ids_.size(), -1);
  std::vector<int32_t> slot_of(ids_.size(), -1);
  for (size_t p = 0; p < ids_.size(); ++p) {
    const int64_t t = static_cast<int64_t>(p) / k;
    if (t % shard_.tp_size != shard_.tp_rank)
      continue;
    int32_t slot = ids_[p];
    if (balancer_) {
      slot = balancer_->slot_for(layer, ids_[p], t);
      balancer_->count(layer, ids_[p], slot);
    }
    slot_of[p] = slot;
    dest_of_pair[p] = static_cast<int32_t>(rank_of_expert(n_physical_, ep, slot));
    ++send_rows[static_cast<size_t>(dest_of_pair[p])];
  }
  std::vector<int64_t> next(send_rows.size(), 0);
  std::exclusive_scan(send_rows.begin(), send_rows.end(), next.begin(), int64_t{0});
  const int64_t n_send = std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0});
  send_.resize(static_cast<size_t>(n_send * width));
  std::vector<int64_t> slot_of_pair(ids_.size(), -1);
  for (size_t p = 0; p < ids_.size(); ++p) {
    if (dest_of_pair[p] < 0)
      continue;
    const int64_t q = next[static_cast<size_t>(dest_of_pair[p])]++;
    slot_of_pair[p] = q;
    float* row = send_.data() + q * width;
    row[0] = static_cast<float>(slot_of[p]);  // slot ids stay far below 2^24: exact as floats
    std::copy_n(host_h_.data() + (static_cast<int64_t>(p) / k) * d, d, row + 1);
  }
  const std::vector<int64_t> from = ep_comm_.all_to_all_rows(send_.data(), send_rows, width, recv_);

  // The rows this rank's experts must run, grouped by expert.
  const auto m = static_cast<int64_t>(recv_.size()) / width;
  std::vector<int32_t> local_of(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    const auto e = static_cast<int64_t>(recv_[static_cast<size_t>(i * width)]);
    const int64_t local = e - w.expert_begin;
    ACTORLLM_CHECK(local >= 0 && local < n_local, "expert parallel: a token was sent to a rank without its expert");
    local_of[static_cast<size_t>(i)] = static_cast<int32_t>(local);
    ++counts[static_cast<size_t>(local)];
  }
  std::vector<int64_t> pos_next(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), pos_next.begin(), int64_t{0});
  std::vector<int32_t> rows(static_cast<size_t>(m));
  std::vector<int64_t> pos_of_row(static_cast<size_t>(m));
  host_h_.resize(static_cast<size_t>(std::max(m, n) * d));
  for (int64_t i = 0; i < m; ++i) {
    const int64_t pos = pos_next[static_cast<size_t>(local_of[static_cast<size_t>(i)])]++;
    rows[static_cast<size_t>(pos)] = static_cast<int32_t>(i);
    pos_of_row[static_cast<size_t>(i)] = pos;
    std::copy_n(recv_.data() + i * width + 1, d, host_h_.data() + i * d);
  }
  if (m > 0) {
    const tensor xr = scratch(be, xr_, dtype::f32, m, d);
    be.upload(xr, host_h_.data(), static_cast<size_t>(m * d) * sizeof(float));
    run_experts(be, w, xr, rows, counts, host_y_);
  }
  ret_.resize(static_cast<size_t>(m * d));
  for (int64_t i = 0; i < m; ++i)
    std::copy_n(host_y_.data() + pos_of_row[static_cast<size_t>(i)] * d, d, ret_.data() + i * d);
  ep_comm_.all_to_all_rows(ret_.data(), from, d, back_);
  ACTORLLM_CHECK(static_cast<int64_t>(back_.size()) == n_send * d, "expert parallel: outputs lost on the way back");
  for (size_t p = 0; p < ids_.size(); ++p) {
    if (slot_of_pair[p] < 0)
      continue;
    float* a = acc_.data() + (static_cast<int64_t>(p) / k) * d;
    const float* y = back_.data() + slot_of_pair[p] * d;
    const float wt = weights_[p];
    for (int64_t i = 0; i < d; ++i)
      a[i] += wt * y[i];
  }
}

void moe_block::forward_idle(backend& be, int64_t layer, const moe_weights& w) {
  ACTORLLM_CHECK(shard_.expert_parallel && ep_comm_.size() > 1, "an idle MoE step outside expert parallelism");
  ids_.clear();
  weights_.clear();
  acc_.clear();
  dispatch_and_combine(be, layer, w, 0);
}

void moe_block::forward(const layer_context& ctx, int64_t layer, const moe_weights& w, layer_scratch& s) {
  backend& be = ctx.be;
  const int64_t n = ctx.in.n_tokens;
  const int64_t n_expert = cfg_.n_expert;
  const int64_t k = cfg_.n_expert_used;
  const int64_t d = cfg_.n_embd;
  ACTORLLM_CHECK(cfg_.is_moe_layer(layer) && !w.empty(), "moe_block::forward on a dense layer");

  const tensor logits = scratch(be, logits_, dtype::f32, n, n_expert);
  be.matmul(s.h, w.router, tensor{}, logits);
  host_logits_.resize(static_cast<size_t>(n * n_expert));
  be.download(logits, host_logits_.data(), host_logits_.size() * sizeof(float));
  ids_.resize(static_cast<size_t>(n * k));
  weights_.resize(ids_.size());
  route_top_k(host_logits_, n_expert, k, cfg_.norm_topk_prob, ids_, weights_);
  for (int32_t e : ids_)
    ++load_[static_cast<size_t>(e)];

  acc_.assign(static_cast<size_t>(n * d), 0.0f);
  if (!shard_.expert_parallel || ep_comm_.size() == 1) {
    // Tensor parallel: this rank holds its slice of every expert and runs it for every token routed there.
    ACTORLLM_CHECK(static_cast<int64_t>(w.experts.size()) == n_expert,
                   "a tensor-parallel MoE shard holds every expert");
    std::vector<int64_t> counts(static_cast<size_t>(n_expert), 0);
    for (int32_t e : ids_)
      ++counts[static_cast<size_t>(e)];
    std::vector<int64_t> next(counts.size(), 0);
    std::exclusive_scan(counts.begin(), counts.end(), next.begin(), int64_t{0});
    std::vector<int32_t> rows(ids_.size());
    std::vector<int64_t> pos_of_pair(ids_.size());
    for (size_t p = 0; p < ids_.size(); ++p) {  // pairs in (token, slot) order: rows sorted by expert, then token
      const int64_t pos = next[static_cast<size_t>(ids_[p])]++;
      rows[static_cast<size_t>(pos)] = static_cast<int32_t>(static_cast<int64_t>(p) / k);
      pos_of_pair[p] = pos;
    }
    run_experts(be, w, s.h, rows, counts, host_y_);
    for (size_t p = 0; p < ids_.size(); ++p) {
      float* a = acc_.data() + (static_cast<int64_t>(p) / k) * d;
      const float* y = host_y_.data() + pos_of_pair[p] * d;
      const float wt = weights_[p];
      for (int64_t i = 0; i < d; ++i)
        a[i] += wt * y[i];
    }
  } else {
    host_h_.resize(static_cast<size_t>(n * d));
    be.download(s.h, host_h_.data(), host_h_.size() * sizeof(float));
    dispatch_and_combine(be, layer, w, n);
  }

  if (!w.shexp_gate_up.empty())
    add_shared_expert(ctx, w, s, acc_);
  be.upload(s.proj, acc_.data(), acc_.size() * sizeof(float));
  if (ctx.comm.size() > 1)
    ctx.comm.all_reduce_sum(s.proj);
}

}  // namespace actorllm::model
