// The float64 reference forward pass and random test weights. Written from transformers' modeling_llama /
// modeling_qwen3 / masking_utils and modeling_rope_utils, plain loops over doubles: slow, obvious, and sharing no
// code with kernels/ (only the weight table, for the names and shapes a checkpoint must have).
#include "reference_llama.hpp"

#include "model/model_error.hpp"
#include "model/weight_table.hpp"
#include "reference_moe.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <string>
#include <string_view>

namespace actorllm::model::test_util {

namespace {

using vec = std::vector<double>;

/// Weight `name` as doubles, after checking it is the full tensor of `shape`.
vec read_weight(const model_weights& w, const std::string& name, const std::vector<int64_t>& shape) {
  const host_tensor& t = w.get(name);
  if (t.shape != shape)
    throw model_error(fmt::format("reference: {} has shape [{}], expected the full [{}]", name,
                                  fmt::join(t.shape, ", "), fmt::join(shape, ", ")));
  if (!is_float_dtype(t.type))
    throw model_error(fmt::format("reference: {} has type {}", name, dtype_name(t.type)));
  if (t.row_offset != 0)
    throw model_error(fmt::format("reference: {} is a vocab slice (row offset {})", name, t.row_offset));
  vec out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<double>(load_as_f32(t.data(), t.type, i));
  return out;
}

/// The bf16 value nearest to v (ties to even), as vcvtne2ps2bf16 rounds an f32 activation.
double round_to_bf16(double v) {
  uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(v));
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<double>(std::bit_cast<float>(bits & 0xffff0000u));
}

/// y = W x (+ b): W is [rows, cols] row-major, as nn.Linear stores it. With matmul_inputs::bf16, x is first rounded
/// to bf16 (through f32) as the engine's bf16 kernels round it.
vec linear(const vec& weight, const vec* bias, vec x, int64_t rows, int64_t cols, matmul_inputs inputs) {
  if (inputs == matmul_inputs::bf16)
    for (double& v : x)
      v = round_to_bf16(v);
  vec y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = weight.data() + r * cols;
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c)
      s += row[c] * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = s + (bias ? (*bias)[static_cast<size_t>(r)] : 0.0);
  }
  return y;
}

/// LlamaRMSNorm over x[offset, offset + n): x / sqrt(mean(x^2) + eps) * gain.
void rms_norm_in_place(vec& x, size_t offset, size_t n, const vec& gain, double eps) {
  double ss = 0.0;
  for (size_t i = 0; i < n; ++i)
    ss += x[offset + i] * x[offset + i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i)
    x[offset + i] = x[offset + i] * inv * gain[i];
}

vec rms_norm(vec x, const vec& gain, double eps) {
  rms_norm_in_place(x, 0, x.size(), gain, eps);
  return x;
}

/// apply_rotary_pos_emb on one head at x[offset, offset + head_dim): rotate_half pairs i with i + head_dim / 2.
void rope_in_place(vec& x, size_t offset, const vec& inv_freq, int64_t pos) {
  const size_t half = inv_freq.size();
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const double c = std::cos(angle);
    const double s = std::sin(angle);
    const double a = x[offset + i];
    const double b = x[offset + half + i];
    x[offset + i] = a * c - b * s;
    x[offset + half + i] = b * c + a * s;
  }
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// splitmix64, for random_weights.
constexpr uint64_t golden_gamma = 0x9e3779b97f4a7c15ull;
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

vec reference_inv_freq(const model_config& cfg) {
  const int64_t dim = cfg.head_dim;
  vec inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i)
    inv[static_cast<size_t>(i)] = 1.0 / std::pow(cfg.rope_theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  const rope_scaling& r = cfg.rope;
  switch (r.type) {
    case rope_scaling::kind::none:
      break;
    case rope_scaling::kind::linear:
      for (double& f : inv)
        f /= r.factor;
      break;
    case rope_scaling::kind::llama3: {
      // _compute_llama3_parameters: long wavelengths are divided by factor, short ones kept, the band between
      // interpolated by how many times the wavelength fits into the original context.
      const auto old_context = static_cast<double>(r.original_max_position_embeddings);
      const double low_freq_wavelen = old_context / r.low_freq_factor;
      const double high_freq_wavelen = old_context / r.high_freq_factor;
      for (double& f : inv) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen > low_freq_wavelen) {
          f /= r.factor;
        } else if (!(wavelen < high_freq_wavelen)) {
          const double smooth = (old_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
          f = (1.0 - smooth) * f / r.factor + smooth * f;
        }
      }
      break;
    }
  }
  return inv;
}

vec reference_logits(const model_config& cfg, const model_weights& w, const std::vector<int32_t>& tokens,
                     matmul_inputs inputs) {
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = cfg.n_embd;
  const int64_t head_dim = cfg.head_dim;
  const int64_t n_head = cfg.n_head;
  const int64_t n_head_kv = cfg.n_head_kv;
  const int64_t q_dim = n_head * head_dim;
  const int64_t kv_dim = n_head_kv * head_dim;
  const int64_t group = n_head / n_head_kv;  // query heads per kv head (repeat_kv)
  const auto eps = static_cast<double>(cfg.rms_norm_eps);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const vec inv_freq = reference_inv_freq(cfg);
  const auto e = static_cast<size_t>(n_embd);

  const vec embed = read_weight(w, "model.embed_tokens.weight", {cfg.n_vocab, n_embd});
  std::vector<vec> x(static_cast<size_t>(n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int32_t id = tokens[static_cast<size_t>(t)];
    if (id < 0 || id >= cfg.n_vocab)
      throw model_error(fmt::format("reference: token {} at position {} is not below n_vocab {}", id, t, cfg.n_vocab));
    x[static_cast<size_t>(t)].assign(embed.begin() + id * n_embd, embed.begin() + (id + 1) * n_embd);
  }

  for (int64_t layer = 0; layer < cfg.n_layer; ++layer) {
    const std::string p = fmt::format("model.layers.{}.", layer);
    const vec attn_norm = read_weight(w, p + "input_layernorm.weight", {n_embd});
    const vec wq = read_weight(w, p + "self_attn.q_proj.weight", {q_dim, n_embd});
    const vec wk = read_weight(w, p + "self_attn.k_proj.weight", {kv_dim, n_embd});
    const vec wv = read_weight(w, p + "self_attn.v_proj.weight", {kv_dim, n_embd});
    const vec wo = read_weight(w, p + "self_attn.o_proj.weight", {n_embd, q_dim});
    vec bq, bk, bv, bo, q_norm, k_norm;
    if (cfg.attention_bias) {
      bq = read_weight(w, p + "self_attn.q_proj.bias", {q_dim});
      bk = read_weight(w, p + "self_attn.k_proj.bias", {kv_dim});
      bv = read_weight(w, p + "self_attn.v_proj.bias", {kv_dim});
    }
    if (cfg.o_proj_bias)
      bo = read_weight(w, p + "self_attn.o_proj.bias", {n_embd});
    if (cfg.qk_norm) {
      q_norm = read_weight(w, p + "self_attn.q_norm.weight", {head_dim});
      k_norm = read_weight(w, p + "self_attn.k_norm.weight", {head_dim});
    }
    const vec ffn_norm = read_weight(w, p + "post_attention_layernorm.weight", {n_embd});
    const bool moe = cfg.is_moe_layer(layer);  // the sparse MLP (reference_moe) instead of the dense one
    const vec w_gate = moe ? vec{} : read_weight(w, p + "mlp.gate_proj.weight", {cfg.n_ff, n_embd});
    const vec w_up = moe ? vec{} : read_weight(w, p + "mlp.up_proj.weight", {cfg.n_ff, n_embd});
    const vec w_down = moe ? vec{} : read_weight(w, p + "mlp.down_proj.weight", {n_embd, cfg.n_ff});

    // q, k, v of every position; Qwen3 normalises each head before the rotation.
    std::vector<vec> q(static_cast<size_t>(n_tokens)), k(q.size()), v(q.size());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const auto ti = static_cast<size_t>(t);
      const vec h = rms_norm(x[ti], attn_norm, eps);
      q[ti] = linear(wq, cfg.attention_bias ? &bq : nullptr, h, q_dim, n_embd, inputs);
      k[ti] = linear(wk, cfg.attention_bias ? &bk : nullptr, h, kv_dim, n_embd, inputs);
      v[ti] = linear(wv, cfg.attention_bias ? &bv : nullptr, h, kv_dim, n_embd, inputs);
      for (int64_t hd = 0; hd < n_head; ++hd) {
        const auto off = static_cast<size_t>(hd * head_dim);
        if (cfg.qk_norm)
          rms_norm_in_place(q[ti], off, static_cast<size_t>(head_dim), q_norm, eps);
        rope_in_place(q[ti], off, inv_freq, t);
      }
      for (int64_t hd = 0; hd < n_head_kv; ++hd) {
        const auto off = static_cast<size_t>(hd * head_dim);
        if (cfg.qk_norm)
          rms_norm_in_place(k[ti], off, static_cast<size_t>(head_dim), k_norm, eps);
        rope_in_place(k[ti], off, inv_freq, t);
      }
    }

    // Causal attention; with a window W, query t sees keys t - W < j <= t (masking_utils' sliding_window_overlay).
    const int64_t window = cfg.window_for(layer);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int64_t first = window > 0 ? std::max<int64_t>(0, t - window + 1) : 0;
      vec attn(static_cast<size_t>(q_dim), 0.0);
      for (int64_t hd = 0; hd < n_head; ++hd) {
        const double* qh = q[static_cast<size_t>(t)].data() + hd * head_dim;
        const int64_t kv_off = (hd / group) * head_dim;
        vec scores;
        for (int64_t j = first; j <= t; ++j) {
          const double* kh = k[static_cast<size_t>(j)].data() + kv_off;
          double s = 0.0;
          for (int64_t d = 0; d < head_dim; ++d)
            s += qh[d] * kh[d];
          scores.push_back(s * scale);
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double& s : scores)
          sum += (s = std::exp(s - m));
        double* out = attn.data() + hd * head_dim;
        for (int64_t j = first; j <= t; ++j) {
          const double pj = scores[static_cast<size_t>(j - first)] / sum;
          const double* vh = v[static_cast<size_t>(j)].data() + kv_off;
          for (int64_t d = 0; d < head_dim; ++d)
            out[d] += pj * vh[d];
        }
      }
      const vec o = linear(wo, cfg.o_proj_bias ? &bo : nullptr, attn, n_embd, q_dim, inputs);
      for (size_t i = 0; i < e; ++i)
        x[static_cast<size_t>(t)][i] += o[i];
    }

    for (auto& xt : x) {
      const vec h = rms_norm(xt, ffn_norm, eps);
      if (moe) {
        const vec d = reference_moe_mlp(cfg, w, layer, h);
        for (size_t i = 0; i < e; ++i)
          xt[i] += d[i];
        continue;
      }
      const vec g = linear(w_gate, nullptr, h, cfg.n_ff, n_embd, inputs);
      vec u = linear(w_up, nullptr, h, cfg.n_ff, n_embd, inputs);
      for (size_t i = 0; i < u.size(); ++i)
        u[i] *= silu(g[i]);
      const vec d = linear(w_down, nullptr, u, n_embd, cfg.n_ff, inputs);
      for (size_t i = 0; i < e; ++i)
        xt[i] += d[i];
    }
  }

  const vec final_norm = read_weight(w, "model.norm.weight", {n_embd});
  const vec lm_head = cfg.tie_word_embeddings ? embed : read_weight(w, "lm_head.weight", {cfg.n_vocab, n_embd});
  vec logits;
  logits.reserve(static_cast<size_t>(n_tokens * cfg.n_vocab));
  for (const auto& xt : x) {
    const vec row = linear(lm_head, nullptr, rms_norm(xt, final_norm, eps), cfg.n_vocab, n_embd, inputs);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

std::vector<int32_t> reference_greedy(const model_config& cfg, const model_weights& w, std::vector<int32_t> prompt,
                                      int64_t n) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    const vec logits = reference_logits(cfg, w, prompt);
    const auto last = logits.end() - cfg.n_vocab;
    const auto next = static_cast<int32_t>(std::max_element(last, logits.end()) - last);
    out.push_back(next);
    prompt.push_back(next);
  }
  return out;
}

model_weights random_weights(const model_config& cfg, uint64_t seed, dtype type) {
  const weight_table table = llama_weight_table(cfg, shard_spec{});
  model_weights weights;
  for (const auto& decl : table.weights) {
    host_tensor& t = weights.insert(decl.name, host_tensor(type, decl.shape));
    double center = 0.0;
    double half_width = 1.0;  // embeddings
    if (ends_with(decl.name, "norm.weight")) {
      center = 1.0;
      half_width = 0.2;
    } else if (ends_with(decl.name, ".bias")) {
      half_width = 0.2;
    } else if (decl.shape.size() == 2 && decl.name != "model.embed_tokens.weight") {
      half_width = std::sqrt(3.0 / static_cast<double>(decl.shape[1]));  // variance 1 / fan_in
    }
    uint64_t key = mix64(seed + golden_gamma);
    for (char c : decl.name)
      key = mix64(key ^ static_cast<unsigned char>(c));
    const auto n = static_cast<uint64_t>(t.numel());
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t h = mix64(key + (i + 1) * golden_gamma);
      const double u = static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0;  // [-1, 1)
      store_from_f32(t.data(), type, i, static_cast<float>(center + half_width * u));
    }
  }
  return weights;
}

model_weights copy_weights(const model_weights& w) {
  model_weights out;
  for (const auto& [name, t] : w.tensors()) {
    host_tensor& c = out.insert(name, host_tensor(t.type, t.shape));
    c.row_offset = t.row_offset;
    std::memcpy(c.data(), t.data(), t.nbytes());
  }
  return out;
}

double worst_shortfall(const model_config& cfg, const model_weights& ref, const std::vector<int32_t>& prompt,
                       const std::vector<int32_t>& output) {
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), output.begin(), output.end());
  const std::vector<double> logits = reference_logits(cfg, ref, seq);
  const auto n_vocab = static_cast<size_t>(cfg.n_vocab);
  double worst = 0;
  for (size_t k = 0; k < output.size(); ++k) {
    const size_t row = (prompt.size() - 1 + k) * n_vocab;
    const double best = *std::max_element(logits.begin() + static_cast<std::ptrdiff_t>(row),
                                          logits.begin() + static_cast<std::ptrdiff_t>(row + n_vocab));
    worst = std::max(worst, best - logits[row + static_cast<size_t>(output[k])]);
  }
  return worst;
}

}  // namespace actorllm::model::test_util
