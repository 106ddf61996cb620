// The placement rule: whole TP groups on one node where any node can hold one, spanning nodes only when none can.
#include "actors/placement.hpp"

#include <fmt/format.h>

#include <iterator>
#include <numeric>

namespace actorllm::actors {

namespace {

std::string describe_nodes(const std::vector<node_resources>& nodes) {
  if (nodes.empty())
    return " no node has joined the cluster";
  std::string out;
  for (const auto& n : nodes)
    fmt::format_to(std::back_inserter(out), "\n  node '{}' ({}): {} {} device(s), {:.1f} GiB free", n.node_id,
                   n.address, n.n_devices, n.device_kind, static_cast<double>(n.free_memory_bytes) / (1ull << 30));
  return out;
}

// The node with the most free devices, the earlier one on ties; -1 when every node has fewer than `at_least`.
int64_t most_free(const std::vector<int32_t>& free_devices, int32_t at_least) {
  int64_t best = -1;
  for (size_t i = 0; i < free_devices.size(); ++i)
    if (free_devices[i] >= at_least && (best < 0 || free_devices[i] > free_devices[static_cast<size_t>(best)]))
      best = static_cast<int64_t>(i);
  return best;
}

}  // namespace

placement_result place_ranks(int32_t tp, int32_t pp, const std::vector<node_resources>& nodes) {
  if (tp < 1 || pp < 1)
    return fmt::format("tensor_parallel_size and pipeline_parallel_size must be at least 1, got tp {} × pp {}", tp, pp);
  for (const auto& n : nodes)
    if (n.n_devices < 0)
      return fmt::format("node '{}' ({}) reports {} devices", n.node_id, n.address, n.n_devices);

  const int64_t asked = static_cast<int64_t>(tp) * pp;
  const int64_t total = std::accumulate(nodes.begin(), nodes.end(), int64_t{0},
                                        [](int64_t sum, const node_resources& n) { return sum + n.n_devices; });
  if (total < asked)
    return fmt::format("cannot place tp {} × pp {} = {} devices: the cluster has {} device(s) on {} node(s):{}", tp, pp,
                       asked, total, nodes.size(), describe_nodes(nodes));

  std::vector<int32_t> free_devices(nodes.size());
  std::vector<int32_t> next_device(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i)
    free_devices[i] = nodes[i].n_devices;
  auto take = [&](size_t node) {
    --free_devices[node];
    return next_device[node]++;
  };

  placement out;
  out.slots.reserve(static_cast<size_t>(asked));
  int64_t current = -1;  // the node of the stage before, while it has room for another TP group
  for (int32_t stage = 0; stage < pp; ++stage) {
    if (current < 0 || free_devices[static_cast<size_t>(current)] < tp)
      current = most_free(free_devices, tp);
    if (current >= 0) {
      const auto node = static_cast<size_t>(current);
      for (int32_t rank = 0; rank < tp; ++rank)
        out.slots.push_back(rank_slot{stage, rank, nodes[node].node_id, take(node)});
      continue;
    }
    // No node holds a whole TP group: gather it from the nodes with the most free devices, fewest nodes first.
    std::string spanned;
    int32_t rank = 0;
    while (rank < tp) {
      const auto node = static_cast<size_t>(most_free(free_devices, 1));  // total >= asked: some node has a device left
      spanned += fmt::format("{}'{}'", spanned.empty() ? "" : ", ", nodes[node].node_id);
      while (rank < tp && free_devices[node] > 0)
        out.slots.push_back(rank_slot{stage, rank++, nodes[node].node_id, take(node)});
    }
    out.warnings.push_back(fmt::format(
        "stage {}'s tensor-parallel group (tp {}) spans nodes {}: no node has {} free devices, so its all-reduces "
        "cross the network",
        stage, tp, spanned, tp));
  }
  return out;
}

}  // namespace actorllm::actors
