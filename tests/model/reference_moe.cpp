// The float64 reference of the MoE blocks: plain loops over doubles, sharing no code with model/moe_layer.
#include "reference_moe.hpp"

#include "model/model_error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace actorllm::model::test_util {

namespace {

using vec = std::vector<double>;

vec read(const model_weights& w, const std::string& name, const std::vector<int64_t>& shape) {
  const host_tensor& t = w.get(name);
  if (t.shape != shape)
    throw model_error(fmt::format("reference: {} has the wrong shape", name));
  vec out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<double>(load_as_f32(t.data(), t.type, i));
  return out;
}

vec matvec(const vec& m, const vec& x, int64_t rows, int64_t cols) {
  vec y(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[static_cast<size_t>(r)] += m[static_cast<size_t>(r * cols + c)] * x[static_cast<size_t>(c)];
  return y;
}

/// down(silu(gate h) * up h).
vec swiglu(const model_weights& w, const std::string& gate, const std::string& up, const std::string& down,
           int64_t n_ff, int64_t n_embd, const vec& h) {
  const vec g = matvec(read(w, gate, {n_ff, n_embd}), h, n_ff, n_embd);
  vec u = matvec(read(w, up, {n_ff, n_embd}), h, n_ff, n_embd);
  for (size_t i = 0; i < u.size(); ++i)
    u[i] *= g[i] / (1.0 + std::exp(-g[i]));
  return matvec(read(w, down, {n_embd, n_ff}), u, n_embd, n_ff);
}

}  // namespace

vec reference_moe_mlp(const model_config& cfg, const model_weights& w, int64_t layer, const vec& h) {
  const bool mixtral = cfg.architecture == "MixtralForCausalLM";
  const std::string p = fmt::format("model.layers.{}.{}", layer, mixtral ? "block_sparse_moe." : "mlp.");
  const int64_t n_embd = cfg.n_embd;
  const int64_t n_expert = cfg.n_expert;
  const vec logits = matvec(read(w, p + "gate.weight", {n_expert, n_embd}), h, n_expert, n_embd);
  const double max = *std::max_element(logits.begin(), logits.end());
  vec prob(logits.size());
  double sum = 0.0;
  for (size_t e = 0; e < prob.size(); ++e)
    sum += prob[e] = std::exp(logits[e] - max);
  for (double& v : prob)
    v /= sum;
  std::vector<int64_t> order(static_cast<size_t>(n_expert));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return prob[static_cast<size_t>(a)] > prob[static_cast<size_t>(b)]; });
  order.resize(static_cast<size_t>(cfg.n_expert_used));
  double top = 0.0;
  for (int64_t e : order)
    top += prob[static_cast<size_t>(e)];

  vec out(static_cast<size_t>(n_embd), 0.0);
  for (int64_t e : order) {
    const std::string q = fmt::format("{}experts.{}.", p, e);
    const vec y = mixtral ? swiglu(w, q + "w1.weight", q + "w3.weight", q + "w2.weight", cfg.n_ff_exp, n_embd, h)
                          : swiglu(w, q + "gate_proj.weight", q + "up_proj.weight", q + "down_proj.weight",
                                   cfg.n_ff_exp, n_embd, h);
    const double weight = prob[static_cast<size_t>(e)] / (cfg.norm_topk_prob ? top : 1.0);
    for (size_t i = 0; i < out.size(); ++i)
      out[i] += weight * y[i];
  }
  if (cfg.n_ff_shexp > 0) {
    const std::string q = p + "shared_expert.";
    const vec y =
        swiglu(w, q + "gate_proj.weight", q + "up_proj.weight", q + "down_proj.weight", cfg.n_ff_shexp, n_embd, h);
    const double g = matvec(read(w, p + "shared_expert_gate.weight", {1, n_embd}), h, 1, n_embd)[0];
    const double gate = 1.0 / (1.0 + std::exp(-g));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] += gate * y[i];
  }
  return out;
}

}  // namespace actorllm::model::test_util
