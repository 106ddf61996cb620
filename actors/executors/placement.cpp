// The placement rule: whole TP groups on one node where any node can hold one, spanning nodes only when none can.
#include "actors/executors/placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <numeric>

namespace actorllm::actors {

namespace {

// Which of the node's devices are in use already (indices in range only).
std::vector<bool> taken_mask(const node_resources& n) {
  std::vector<bool> taken(static_cast<size_t>(std::max(0, n.n_devices)), false);
  for (int32_t d : n.taken_devices)
    if (d >= 0 && d < n.n_devices)
      taken[static_cast<size_t>(d)] = true;
  return taken;
}

std::string describe_nodes(const std::vector<node_resources>& nodes) {
  if (nodes.empty())
    return " no node has joined the cluster";
  std::string out;
  for (const auto& n : nodes) {
    fmt::format_to(std::back_inserter(out), "\n  node '{}' ({}): {} {} device(s), {:.1f} GiB free", n.node_id,
                   n.address, n.n_devices, n.device_kind, static_cast<double>(n.free_memory_bytes) / (1ull << 30));
    const auto taken = taken_mask(n);
    if (const auto used = std::count(taken.begin(), taken.end(), true); used > 0)
      fmt::format_to(std::back_inserter(out), ", {} taken by other workers", used);
  }
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
  std::vector<std::vector<bool>> taken(nodes.size());
  std::vector<int32_t> free_devices(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    taken[i] = taken_mask(nodes[i]);
    free_devices[i] = static_cast<int32_t>(std::count(taken[i].begin(), taken[i].end(), false));
  }
  const int64_t total = std::accumulate(free_devices.begin(), free_devices.end(), int64_t{0});
  const bool any_taken = std::any_of(nodes.begin(), nodes.end(), [](const node_resources& n) {
    return std::any_of(n.taken_devices.begin(), n.taken_devices.end(),
                       [&](int32_t d) { return d >= 0 && d < n.n_devices; });
  });
  if (total < asked)
    return fmt::format("cannot place tp {} × pp {} = {} devices: the cluster has {} {}device(s) on {} node(s):{}", tp,
                       pp, asked, total, any_taken ? "free " : "", nodes.size(), describe_nodes(nodes));

  auto take = [&](size_t node) {
    auto& mask = taken[node];
    const auto device = static_cast<int32_t>(std::find(mask.begin(), mask.end(), false) - mask.begin());
    mask[static_cast<size_t>(device)] = true;
    --free_devices[node];
    return device;
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
