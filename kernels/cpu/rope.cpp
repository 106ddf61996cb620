// Rotary position embedding.
#include "kernels/cpu/rope.hpp"

#include <cmath>
#include <numbers>

#include "util/check.hpp"

namespace actorllm::cpu {

std::vector<float> rope_inv_freq(const rope_config& cfg) {
  ACTORLLM_CHECK(cfg.head_dim > 0 && cfg.head_dim % 2 == 0, "rope: head_dim must be positive and even");
  int64_t half = cfg.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  // transformers: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), all in float32. The power is taken in
  // double and rounded once (torch's float pow is correctly rounded up to an ulp).
  auto base = static_cast<float>(cfg.theta);
  auto dim = static_cast<float>(cfg.head_dim);
  for (int64_t i = 0; i < half; ++i) {
    float exponent = static_cast<float>(2 * i) / dim;
    auto p = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
    inv[static_cast<size_t>(i)] = 1.0f / p;
  }

  const rope_scaling& s = cfg.scaling;
  if (s.type == rope_scaling::kind::linear) {
    auto factor = static_cast<float>(s.factor);
    for (float& f : inv)
      f /= factor;
  } else if (s.type == rope_scaling::kind::llama3) {
    // _compute_llama3_parameters; python floats meet float32 tensors, so each op rounds to float32.
    auto factor = static_cast<float>(s.factor);
    auto low = static_cast<float>(s.low_freq_factor);
    auto old_ctx = static_cast<float>(s.original_max_position_embeddings);
    auto low_freq_wavelen =
        static_cast<float>(static_cast<double>(s.original_max_position_embeddings) / s.low_freq_factor);
    auto high_freq_wavelen =
        static_cast<float>(static_cast<double>(s.original_max_position_embeddings) / s.high_freq_factor);
    auto band = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
    auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
    for (float& f : inv) {
      float wavelen = two_pi / f;
      float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        float smooth = (old_ctx / wavelen - low) / band;
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

void rope_angles(const float* inv_freq, int64_t head_dim, int32_t position, float* cos_out, float* sin_out) {
  ACTORLLM_CHECK(head_dim % 2 == 0, "rope: head_dim must be even");
  const auto pos = static_cast<double>(position);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double angle = pos * static_cast<double>(inv_freq[i]);
    cos_out[i] = static_cast<float>(std::cos(angle));
    sin_out[i] = static_cast<float>(std::sin(angle));
  }
}

void rotate_heads(const float* cs, const float* sn, int64_t head_dim, float* x, int64_t n_heads) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    // Written so the compiler vectorises over i (pairs are half a head apart, no shuffles needed).
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cs[i] - b * sn[i];
      v[i + half] = b * cs[i] + a * sn[i];
    }
  }
}

void apply_rope(const float* inv_freq, int64_t head_dim, const int32_t* positions, int64_t n_tokens, float* q,
                int64_t n_head, float* k, int64_t n_head_kv) {
  ACTORLLM_CHECK(head_dim % 2 == 0, "rope: head_dim must be even");
  const int64_t half = head_dim / 2;
  thread_local std::vector<float> cos_buf, sin_buf;
  cos_buf.resize(static_cast<size_t>(half));
  sin_buf.resize(static_cast<size_t>(half));
  for (int64_t t = 0; t < n_tokens; ++t) {
    rope_angles(inv_freq, head_dim, positions[t], cos_buf.data(), sin_buf.data());
    rotate_heads(cos_buf.data(), sin_buf.data(), head_dim, q + t * n_head * head_dim, n_head);
    if (k != nullptr)
      rotate_heads(cos_buf.data(), sin_buf.data(), head_dim, k + t * n_head_kv * head_dim, n_head_kv);
  }
}

}  // namespace actorllm::cpu
