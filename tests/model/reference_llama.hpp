// A float64 reference forward pass of the Llama family (Llama, Mistral, Qwen2, Qwen3) for tests, written from the
// Hugging Face modeling code and independent of kernels/: the engine's output is checked against it. Also seeded
// random weights for any model_config, so that tests can build tiny models of every family (biases, qk_norm,
// per-layer sliding windows) without a checkpoint.
#pragma once

#include "kernels/dtype.hpp"
#include "model/model_config.hpp"
#include "model/model_weights.hpp"

#include <cstdint>
#include <vector>

namespace actorllm::model::test_util {

/// What the reference does to a projection's input: keep it exact, or round it to bf16 first.
enum class matmul_inputs { exact, bf16 };

/// The logits of every position of one sequence that starts at position 0: [tokens.size(), n_vocab] row-major.
/// `w` holds full (unsliced, tp 1, all layers) weights under their Hugging Face names, as load_shard(dir, {}, {})
/// or random_weights return them; any float dtype, read exactly and computed in double. Per layer: RMSNorm, q/k/v
/// projections (+ biases when cfg.attention_bias), Qwen3's per-head q_norm/k_norm (cfg.qk_norm), RoPE in
/// rotate_half layout (cfg.rope_theta, linear or llama3 scaling), causal GQA softmax attention limited to
/// cfg.window_for(layer) positions when non-zero, o_proj (+ bias when cfg.o_proj_bias), SwiGLU MLP; then the final
/// norm and lm_head.weight (model.embed_tokens.weight when tie_word_embeddings). Throws model_error when a weight
/// is missing or misshapen or a token is out of range.
/// With matmul_inputs::bf16 every projection's input (the normed activations, the attention output, SiLU(gate) x up,
/// the final norm's output; MoE experts stay exact) is first rounded to bf16 as the engine's bf16 kernels round it,
/// the rest stays double: what the engine's arithmetic would give if it lost nothing else.
std::vector<double> reference_logits(const model_config& cfg, const model_weights& w,
                                     const std::vector<int32_t>& tokens, matmul_inputs inputs = matmul_inputs::exact);

/// The rotary inverse frequencies (head_dim / 2 of them) for cfg.rope_theta and cfg.rope, as transformers'
/// ROPE_INIT_FUNCTIONS compute them ("default", "linear", "llama3"), in double.
std::vector<double> reference_inv_freq(const model_config& cfg);

/// How far the reference logit of each token of `output` (generated after `prompt`) falls short of the reference's
/// best at its position, the largest over the output: 0 when every token is the reference's argmax. Tests hold an
/// engine's greedy ids to a small bound of it where f32 arithmetic may break a near tie the other way.
double worst_shortfall(const model_config& cfg, const model_weights& w, const std::vector<int32_t>& prompt,
                       const std::vector<int32_t>& output);

/// Greedy continuation of `prompt` by `n` tokens, recomputing reference_logits over the whole sequence each step.
std::vector<int32_t> reference_greedy(const model_config& cfg, const model_weights& w, std::vector<int32_t> prompt,
                                      int64_t n);

/// Seeded random weights of type `type` for every tensor llama_weight_table(cfg, shard_spec{}) declares, scaled so
/// that activations stay near unit size through any depth (linear weights uniform with variance 1 / fan_in,
/// embeddings in [-1, 1), norm gains 1 +- 0.2, biases +- 0.2): attention then really prefers some positions, so a
/// wrong window or rotation shows. The same (cfg, seed, type) always gives the same weights.
model_weights random_weights(const model_config& cfg, uint64_t seed, dtype type);

/// A deep copy (the engine takes its weights by value and moves their storage into the backend).
model_weights copy_weights(const model_weights& w);

}  // namespace actorllm::model::test_util
