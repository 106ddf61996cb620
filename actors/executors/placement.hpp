// Where each rank of a TP × PP replica runs on a cluster: vLLM's rule of thumb, a TP group inside one node and
// pipeline stages across nodes (docs/DESIGN.md §4). Pure logic over the nodes' reported resources, no CAF, so the
// cluster executor and the tests share one deterministic rule.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace actorllm::actors {

/// What a node agent reported when it joined.
struct node_resources {
  std::string node_id;
  std::string address;             ///< host:port the node's agent listens on
  int32_t n_devices = 0;           ///< the node's devices, 0..n_devices-1 (agents report all, used or not)
  std::string device_kind;         ///< "cpu" or "cuda"
  uint64_t free_memory_bytes = 0;  ///< free device memory (all devices together)
  /// Devices that other workers hold already (other replicas of this engine, other engines): never handed out.
  /// Indices outside 0..n_devices-1 and repeats are ignored.
  std::vector<int32_t> taken_devices;
};

/// One rank: its pipeline stage, its rank inside the stage's TP group, and the node and device it runs on.
struct rank_slot {
  int32_t stage = 0;
  int32_t tp_rank = 0;
  std::string node_id;
  int32_t device = 0;  ///< device index on that node

  friend bool operator==(const rank_slot&, const rank_slot&) = default;
};

/// Every rank's slot, and the warnings the placement gives (one per TP group that spans nodes).
struct placement {
  /// Stage-major like the executor's shard order: stage 0 tp ranks 0..tp-1, then stage 1, ...
  std::vector<rank_slot> slots;
  std::vector<std::string> warnings;
};

/// A placement, or the message saying why the ranks do not fit (what was asked and what each node has).
using placement_result = std::variant<placement, std::string>;

/// Places tp × pp ranks on the devices of `nodes` that are not taken (node_resources::taken_devices), so that
/// placing a second replica, or a replica again while the others serve, never hands out a device in use. Each
/// stage in turn: a stage whose TP group fits on one node stays on the node
/// of the stage before when that node still has tp free devices (stages share a node that has room), else goes to
/// the node with the most free devices (ties: the earlier node). A TP group spans nodes only when no node has tp
/// free devices; it takes devices from the nodes with the most free first and adds a warning naming the stage and
/// the nodes. Free devices on a node are handed out in index order. When all nodes together have fewer than
/// tp × pp free devices the error says so at once, listing every node (id, address, devices, kind, free memory in
/// GiB, devices taken).
placement_result place_ranks(int32_t tp, int32_t pp, const std::vector<node_resources>& nodes);

}  // namespace actorllm::actors
