// A dense layer's whole SwiGLU MLP on packed bf16 weights, y = (silu(x gate^T) * (x up^T)) down^T, with down's sum over
// its inputs split in two halves so that at decode it runs as one pool call: the second half of gate|up's outputs is
// still being computed while the first half of down already reads them. Batch-1 decode streams every weight once and
// each core alone reads about half of what two do, so the wait for the last grain of gate|up and down's own call
// set-up, once a layer each, were memory bandwidth lost.
#pragma once

#include <cstdint>
#include <memory>

#include "util/thread_pool.hpp"

namespace actorllm::cpu {

/// The three weights of swiglu_down, all in tensor_layout::cpu_bf16_panels.
struct swiglu_down_weights {
  const uint16_t* gate_up = nullptr;  ///< [2 n_ff, n_in]: gate's n_ff rows, then up's (each part whole panels)
  const uint16_t* down = nullptr;     ///< [n_out, n_ff]
  int64_t n_in = 0;
  int64_t n_ff = 0;
  int64_t n_out = 0;
  /// Keep the weights alive for a thread the OS descheduled mid-call (matmul_target::owner); both must be set.
  std::shared_ptr<const void> gate_up_owner;
  std::shared_ptr<const void> down_owner;
};

/// Whether swiglu_down takes an MLP of this width on this build and CPU: the vdpbf16ps kernels, and n_ff a multiple
/// of 64 (each half of down's inputs whole steps of 32).
bool swiglu_down_supported(int64_t n_ff);

/// act = silu(x gate^T) * (x up^T), f32 [n_tokens, n_ff] (as matmul_silu_gate writes it, bit for bit), and
/// y = act down^T, f32 [n_tokens, n_out], with act rounded to bf16 and down's sum taken over each half of its inputs
/// and the two halves added (first + second): the same bits at every n_tokens. x: f32 [n_tokens, n_in]; up_scratch:
/// f32 [n_tokens, n_ff], overwritten. Up to 4 tokens the whole MLP is one pool call
/// (thread_pool::parallel_for_takeover with grains that wait for the gate|up outputs they read); more run gate|up,
/// then down over panels. Requires swiglu_down_supported(w.n_ff).
void swiglu_down(const float* x, int64_t n_tokens, const swiglu_down_weights& w, float* up_scratch, float* act,
                 float* y, thread_pool& pool);

/// Process-wide, for benches that compare: whether the decode runs as one call (true, the default) or as the two
/// calls of matmul_silu_gate and matmul with down's sum taken whole, as before swiglu_down.
void set_swiglu_down_fused(bool on);
bool swiglu_down_fused();

}  // namespace actorllm::cpu
