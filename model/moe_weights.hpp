// The weights of one mixture-of-experts MLP block as a shard holds them, and where experts live under expert
// parallelism. Kept apart from the dense layer's struct so that the dense and the sparse MLP evolve independently.
#pragma once

#include "kernels/tensor.hpp"
#include "model/stacked_linear.hpp"

#include <cstdint>
#include <vector>

namespace actorllm::model {

/// One expert's SwiGLU MLP (Mixtral w1/w3/w2, Qwen gate/up/down_proj). Under tensor parallelism the rank's slice of
/// the intermediate rows; under expert parallelism the whole expert.
struct expert_weights {
  stacked_linear gate_up;  ///< gate|up [2 * n_ff_exp (or this rank's rows), n_embd] stacked: parts 0, 1 = gate, up
  tensor w_down;           ///< [n_embd, n_ff_exp (or this rank's columns)]
};

/// A sparse MLP block. Empty (no router) on the dense layers.
struct moe_weights {
  tensor router;  ///< gate.weight [n_expert, n_embd], replicated
  /// Global id of experts[0]: its expert id, or under expert-parallel load balancing its physical slot (the expert a
  /// slot holds then changes as the balancer moves experts between ranks).
  int64_t expert_begin = 0;
  std::vector<expert_weights> experts;  ///< the experts (slots) this rank computes: [expert_begin, expert_begin + size)
  stacked_linear shexp_gate_up;         ///< Qwen2-MoE shared_expert.gate|up_proj (column-parallel), or empty
  tensor shexp_down;                    ///< shared_expert.down_proj (row-parallel)
  tensor shexp_router;                  ///< shared_expert_gate.weight [1, n_embd]: the sigmoid gate, replicated

  bool empty() const { return router.empty(); }
};

/// The contiguous range of experts rank `ep_rank` of an expert-parallel group of `ep_size` ranks holds (vLLM's
/// linear placement: n_expert / ep_size each, the remainder one more on the first ranks).
struct expert_range {
  int64_t begin = 0;
  int64_t count = 0;
};
inline expert_range experts_of_rank(int64_t n_expert, int64_t ep_rank, int64_t ep_size) {
  const int64_t base = n_expert / ep_size;
  const int64_t extra = n_expert % ep_size;
  return {ep_rank * base + (ep_rank < extra ? ep_rank : extra), base + (ep_rank < extra ? 1 : 0)};
}
/// The expert-parallel rank that holds global expert `expert` (the inverse of experts_of_rank).
inline int64_t rank_of_expert(int64_t n_expert, int64_t ep_size, int64_t expert) {
  const int64_t base = n_expert / ep_size;
  const int64_t extra = n_expert % ep_size;
  const int64_t split = extra * (base + 1);  // experts held by the ranks with one more
  return expert < split ? expert / (base + 1) : extra + (expert - split) / base;
}

}  // namespace actorllm::model
