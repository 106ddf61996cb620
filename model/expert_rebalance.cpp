// vLLM's expert-parallel load balancing policy (vllm/distributed/eplb/policy), written over plain vectors: one
// layer at a time, where vLLM runs the same steps batched over layers as tensors.
#include "model/expert_rebalance.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace actorllm::model {

packing balanced_packing(std::span<const double> weight, int64_t n_packs) {
  const auto n_items = static_cast<int64_t>(weight.size());
  if (n_packs < 1 || n_items % n_packs != 0)
    throw std::invalid_argument(fmt::format("balanced_packing: {} items do not split into {} packs", n_items, n_packs));
  const int64_t per_pack = n_items / n_packs;
  packing out{std::vector<int32_t>(weight.size()), std::vector<int32_t>(weight.size(), 0)};
  if (per_pack == 1) {  // one item each: nothing to balance
    std::iota(out.pack_of.begin(), out.pack_of.end(), 0);
    return out;
  }
  std::vector<int32_t> order(weight.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return weight[static_cast<size_t>(a)] > weight[static_cast<size_t>(b)];
  });
  std::vector<double> pack_weight(static_cast<size_t>(n_packs), 0.0);
  std::vector<int64_t> pack_items(static_cast<size_t>(n_packs), 0);
  for (int32_t item : order) {
    int64_t best = -1;
    for (int64_t p = 0; p < n_packs; ++p)
      if (pack_items[static_cast<size_t>(p)] < per_pack &&
          (best < 0 || pack_weight[static_cast<size_t>(p)] < pack_weight[static_cast<size_t>(best)]))
        best = p;
    out.pack_of[static_cast<size_t>(item)] = static_cast<int32_t>(best);
    out.rank_in_pack[static_cast<size_t>(item)] = static_cast<int32_t>(pack_items[static_cast<size_t>(best)]++);
    pack_weight[static_cast<size_t>(best)] += weight[static_cast<size_t>(item)];
  }
  return out;
}

replication replicate_experts(std::span<const double> weight, int64_t n_physical) {
  const auto n_logical = static_cast<int64_t>(weight.size());
  if (n_physical < n_logical)
    throw std::invalid_argument(
        fmt::format("replicate_experts: {} physical slots cannot hold {} logical experts", n_physical, n_logical));
  replication out;
  out.phys_to_log.resize(static_cast<size_t>(n_physical));
  out.replica.assign(static_cast<size_t>(n_physical), 0);
  out.log_count.assign(static_cast<size_t>(n_logical), 1);
  std::iota(out.phys_to_log.begin(), out.phys_to_log.begin() + n_logical, 0);
  for (int64_t slot = n_logical; slot < n_physical; ++slot) {
    // The expert whose replicas carry the most each; the first such on ties (torch.max's argmax).
    int64_t hottest = 0;
    for (int64_t e = 1; e < n_logical; ++e)
      if (weight[static_cast<size_t>(e)] / out.log_count[static_cast<size_t>(e)] >
          weight[static_cast<size_t>(hottest)] / out.log_count[static_cast<size_t>(hottest)])
        hottest = e;
    out.phys_to_log[static_cast<size_t>(slot)] = static_cast<int32_t>(hottest);
    out.replica[static_cast<size_t>(slot)] = out.log_count[static_cast<size_t>(hottest)]++;
  }
  return out;
}

namespace {

/// The inverse of a permutation of [0, n).
std::vector<int32_t> inverse(std::span<const int32_t> perm) {
  std::vector<int32_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[static_cast<size_t>(perm[i])] = static_cast<int32_t>(i);
  return inv;
}

/// The hierarchical policy for one layer (vLLM's rebalance_experts_hierarchical); the global policy is its case of
/// one group on one node.
layer_placement rebalance_layer(std::span<const double> w, int64_t n_physical, int64_t n_groups, int64_t n_nodes,
                                int64_t n_ranks) {
  const auto n_logical = static_cast<int64_t>(w.size());
  const int64_t group_size = n_logical / n_groups;
  const int64_t groups_per_node = n_groups / n_nodes;
  const int64_t log_per_node = n_logical / n_nodes;
  const int64_t phys_per_node = n_physical / n_nodes;
  const int64_t ranks_per_node = n_ranks / n_nodes;
  const int64_t phys_per_rank = n_physical / n_ranks;

  // 1. Expert groups onto nodes, by the groups' loads. "Meta-logical" ids number the experts node by node.
  std::vector<double> group_load(static_cast<size_t>(n_groups), 0.0);
  for (int64_t e = 0; e < n_logical; ++e)
    group_load[static_cast<size_t>(e / group_size)] += w[static_cast<size_t>(e)];
  const packing groups = balanced_packing(group_load, n_nodes);
  std::vector<int32_t> log_to_mlog(static_cast<size_t>(n_logical));
  for (int64_t e = 0; e < n_logical; ++e) {
    const auto g = static_cast<size_t>(e / group_size);
    log_to_mlog[static_cast<size_t>(e)] = static_cast<int32_t>(
        (groups.pack_of[g] * groups_per_node + groups.rank_in_pack[g]) * group_size + e % group_size);
  }
  const std::vector<int32_t> mlog_to_log = inverse(log_to_mlog);

  layer_placement out;
  out.phys_to_log.resize(static_cast<size_t>(n_physical));
  out.replica.resize(static_cast<size_t>(n_physical));
  out.log_count.resize(static_cast<size_t>(n_logical));
  std::vector<double> node_load(static_cast<size_t>(log_per_node));
  std::vector<double> phys_load(static_cast<size_t>(phys_per_node));
  for (int64_t node = 0; node < n_nodes; ++node) {
    const int64_t mlog_base = node * log_per_node;
    // 2. Within the node, the redundant slots go to its hottest experts.
    for (int64_t i = 0; i < log_per_node; ++i)
      node_load[static_cast<size_t>(i)] = w[static_cast<size_t>(mlog_to_log[static_cast<size_t>(mlog_base + i)])];
    const replication rep = replicate_experts(node_load, phys_per_node);
    // 3. The node's replicas onto its ranks, by the load each replica carries.
    for (int64_t k = 0; k < phys_per_node; ++k) {
      const auto m = static_cast<size_t>(rep.phys_to_log[static_cast<size_t>(k)]);
      phys_load[static_cast<size_t>(k)] = node_load[m] / rep.log_count[m];
    }
    const packing ranks = balanced_packing(phys_load, ranks_per_node);
    for (int64_t k = 0; k < phys_per_node; ++k) {
      const int64_t slot = node * phys_per_node + ranks.pack_of[static_cast<size_t>(k)] * phys_per_rank +
                           ranks.rank_in_pack[static_cast<size_t>(k)];
      const int64_t mlog = mlog_base + rep.phys_to_log[static_cast<size_t>(k)];
      out.phys_to_log[static_cast<size_t>(slot)] = mlog_to_log[static_cast<size_t>(mlog)];
      out.replica[static_cast<size_t>(slot)] = rep.replica[static_cast<size_t>(k)];
    }
    for (int64_t i = 0; i < log_per_node; ++i)
      out.log_count[static_cast<size_t>(mlog_to_log[static_cast<size_t>(mlog_base + i)])] =
          rep.log_count[static_cast<size_t>(i)];
  }
  return out;
}

}  // namespace

std::vector<layer_placement> rebalance_experts(const std::vector<std::vector<double>>& load, int64_t n_physical,
                                               int64_t n_groups, int64_t n_nodes, int64_t n_ranks) {
  std::vector<layer_placement> out;
  if (load.empty())
    return out;
  const auto n_logical = static_cast<int64_t>(load.front().size());
  if (n_logical < 1 || n_ranks < 1 || n_physical < n_logical || n_physical % n_ranks != 0)
    throw std::invalid_argument(
        fmt::format("rebalance_experts: {} physical slots must hold the {} logical experts and split evenly over {} "
                    "ranks",
                    n_physical, n_logical, n_ranks));
  if (n_groups < 1 || n_nodes < 1 || n_logical % n_groups != 0 || n_ranks % n_nodes != 0)
    throw std::invalid_argument(
        fmt::format("rebalance_experts: {} experts in {} groups over {} ranks on {} nodes do not divide evenly",
                    n_logical, n_groups, n_ranks, n_nodes));
  const bool hierarchical = n_groups % n_nodes == 0;
  for (const auto& w : load) {
    if (static_cast<int64_t>(w.size()) != n_logical)
      throw std::invalid_argument("rebalance_experts: every layer's load needs one entry per logical expert");
    out.push_back(hierarchical ? rebalance_layer(w, n_physical, n_groups, n_nodes, n_ranks)
                               : rebalance_layer(w, n_physical, 1, 1, n_ranks));
  }
  return out;
}

layer_placement initial_placement(int64_t n_logical, int64_t n_physical) {
  layer_placement p;
  p.log_count.assign(static_cast<size_t>(n_logical), 0);
  for (int64_t slot = 0; slot < n_physical; ++slot) {
    const auto e = static_cast<int32_t>(slot % n_logical);
    p.phys_to_log.push_back(e);
    p.replica.push_back(p.log_count[static_cast<size_t>(e)]++);
  }
  return p;
}

std::vector<double> tokens_per_rank(std::span<const double> load, const layer_placement& p, int64_t n_ranks) {
  std::vector<double> out(static_cast<size_t>(n_ranks), 0.0);
  const auto per_rank = static_cast<int64_t>(p.phys_to_log.size()) / n_ranks;
  for (size_t slot = 0; slot < p.phys_to_log.size(); ++slot) {
    const auto e = static_cast<size_t>(p.phys_to_log[slot]);
    out[slot / static_cast<size_t>(per_rank)] += load[e] / p.log_count[e];
  }
  return out;
}

double max_over_mean(std::span<const double> per_rank) {
  if (per_rank.empty())
    return 1.0;
  const double sum = std::accumulate(per_rank.begin(), per_rank.end(), 0.0);
  if (sum <= 0.0)
    return 1.0;
  return *std::max_element(per_rank.begin(), per_rank.end()) / (sum / static_cast<double>(per_rank.size()));
}

}  // namespace actorllm::model
