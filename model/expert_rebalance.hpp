// Expert-parallel load balancing's placement algorithm (vLLM's hierarchical policy, DeepSeek's EPLB): given how many
// tokens each logical expert of each MoE layer received, which logical expert every physical expert slot holds, with
// redundant copies of the hottest experts, so that the ranks of the expert-parallel group get similar loads. A pure
// function of its inputs: every rank of the group computes it from the same (all-reduced) load and gets the same
// placement, so the ranks never have to agree on it by messages.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace actorllm::model {

/// Items packed into packs of equal item counts: pack_of[i] and the item's position in its pack.
struct packing {
  std::vector<int32_t> pack_of;
  std::vector<int32_t> rank_in_pack;
};

/// Packs `weight.size()` items into `n_packs` packs of weight.size() / n_packs items each (n_packs must divide it),
/// keeping the heaviest pack light: items taken heaviest first (ties: the lower index first), each into the lightest
/// pack that still has room (ties: the lower pack). vLLM's balanced_packing.
packing balanced_packing(std::span<const double> weight, int64_t n_packs);

/// Which logical expert each of n_physical slots holds when `weight.size()` logical experts get n_physical -
/// weight.size() redundant copies: slot i < n_logical holds expert i, and each further slot copies the expert with
/// the most load per replica so far (ties: the lower id). vLLM's replicate_experts.
struct replication {
  std::vector<int32_t> phys_to_log;  ///< [n_physical]
  std::vector<int32_t> replica;      ///< [n_physical]: the slot's index among its expert's replicas (0 first)
  std::vector<int32_t> log_count;    ///< [n_logical]: replicas of each expert (>= 1)
};
replication replicate_experts(std::span<const double> weight, int64_t n_physical);

/// One MoE layer's placement: n_physical slots, n_physical / n_ranks per rank of the EP group, rank r holding slots
/// [r * slots_per_rank, (r + 1) * slots_per_rank).
struct layer_placement {
  std::vector<int32_t> phys_to_log;  ///< [n_physical]: the logical expert each slot holds
  std::vector<int32_t> replica;      ///< [n_physical]: the slot's index among its expert's replicas
  std::vector<int32_t> log_count;    ///< [n_logical]: replicas of each logical expert (>= 1)
};

/// vLLM's rebalance_experts: the placement of every layer, from `load` [n_layers][n_logical] (tokens per logical
/// expert over the window). When n_groups divides by n_nodes (grouped experts, e.g. DeepSeek's n_group; 1 for
/// models without groups), the hierarchical policy: expert groups packed onto nodes, experts replicated within each
/// node, and the replicas packed onto the node's ranks; otherwise the global policy (one group, one node). Needs
/// n_logical % n_groups == 0, n_ranks % n_nodes == 0, n_physical % n_ranks == 0 and n_physical >= n_logical; throws
/// std::invalid_argument naming the numbers otherwise.
std::vector<layer_placement> rebalance_experts(const std::vector<std::vector<double>>& load, int64_t n_physical,
                                               int64_t n_groups, int64_t n_nodes, int64_t n_ranks);

/// The initial placement before any load is known (vLLM's): slot i holds logical expert i % n_logical.
layer_placement initial_placement(int64_t n_logical, int64_t n_physical);

/// Tokens per rank of the EP group when `load` (per logical expert) is served by `p`, each expert's tokens split
/// evenly over its replicas (what the engine's per-token spreading does on average): [n_ranks].
std::vector<double> tokens_per_rank(std::span<const double> load, const layer_placement& p, int64_t n_ranks);

/// Max over mean of per-rank tokens (1: perfect balance; vLLM logs the inverse as its balancedness). 1 when no
/// rank has tokens.
double max_over_mean(std::span<const double> per_rank);

}  // namespace actorllm::model
