// Rotary position embedding (RoPE) as Hugging Face Llama applies it: rotate_half layout, default / linear /
// llama3 frequency scaling.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/rope_scaling.hpp"

namespace actorllm::cpu {

/// The head_dim/2 inverse frequencies of `cfg`, computed as transformers' rope init does (float32 arithmetic in
/// the same order: theta^(2i/head_dim), then linear division by factor or the llama3 wavelength-band rescaling of
/// _compute_llama3_parameters).
std::vector<float> rope_inv_freq(const rope_config& cfg);

/// Rotates q [n_tokens, n_head, head_dim] and k [n_tokens, n_head_kv, head_dim] in place, token t by angle
/// positions[t] * inv_freq[i] for the pair (i, i + head_dim/2) (HF rotate_half layout). The angle and its
/// cos/sin are computed in double (HF rounds the angle to float32, which costs ~1e-2 rad at 128k positions), so
/// the result matches a float64 reference to float precision at any position. k may be null (n_head_kv ignored).
void apply_rope(const float* inv_freq, int64_t head_dim, const int32_t* positions, int64_t n_tokens, float* q,
                int64_t n_head, float* k, int64_t n_head_kv);

/// apply_rope's two halves for one token, for a kernel that rotates the heads it needs where it needs them: the
/// cos/sin of `position`'s head_dim/2 angles (cos_out, sin_out), then the rotation of n_heads consecutive heads of x
/// by them. The same numbers as apply_rope.
void rope_angles(const float* inv_freq, int64_t head_dim, int32_t position, float* cos_out, float* sin_out);
void rotate_heads(const float* cs, const float* sn, int64_t head_dim, float* x, int64_t n_heads);

}  // namespace actorllm::cpu
