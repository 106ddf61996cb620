// Placing TP × PP ranks on a cluster's nodes: TP groups inside a node, stages across nodes, spanning only when no
// node can hold a TP group (with a warning), and an error listing every node when the ranks do not fit.
#include "actors/executors/placement.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace actorllm;
using actors::node_resources;
using actors::rank_slot;

namespace {

constexpr uint64_t gib = 1ull << 30;

actors::placement placed(const actors::placement_result& r) {
  if (auto* err = std::get_if<std::string>(&r))
    FAIL("unexpected error: " << *err);
  return std::get<actors::placement>(r);
}

std::string error_of(const actors::placement_result& r) {
  auto* err = std::get_if<std::string>(&r);
  return err ? *err : std::string{"(no error)"};
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

node_resources node(std::string id, int32_t n_devices, std::string kind = "cuda", uint64_t free_memory = 80 * gib) {
  std::string address = id;
  address.append(".local:29501");
  return node_resources{std::move(id), std::move(address), n_devices, std::move(kind), free_memory, {}};
}

std::vector<node_resources> nodes(int32_t n_nodes, int32_t n_devices) {
  std::vector<node_resources> out;
  for (int32_t i = 0; i < n_nodes; ++i)
    out.push_back(node(fmt::format("n{}", i), n_devices));
  return out;
}

}  // namespace

TEST_CASE("2 nodes × 2 devices, tp 2 pp 2: each stage on its own node") {
  auto p = placed(actors::place_ranks(2, 2, nodes(2, 2)));
  CHECK(p.slots == std::vector<rank_slot>{{0, 0, "n0", 0}, {0, 1, "n0", 1}, {1, 0, "n1", 0}, {1, 1, "n1", 1}});
  CHECK(p.warnings.empty());
}

TEST_CASE("1 node × 4 devices, tp 2 pp 2: both stages share the node, on distinct devices") {
  auto p = placed(actors::place_ranks(2, 2, nodes(1, 4)));
  CHECK(p.slots == std::vector<rank_slot>{{0, 0, "n0", 0}, {0, 1, "n0", 1}, {1, 0, "n0", 2}, {1, 1, "n0", 3}});
  CHECK(p.warnings.empty());
}

TEST_CASE("tp 1 pp 1 on one device") {
  auto p = placed(actors::place_ranks(1, 1, nodes(1, 1)));
  CHECK(p.slots == std::vector<rank_slot>{{0, 0, "n0", 0}});
  CHECK(p.warnings.empty());
}

TEST_CASE("4 nodes × 1 device, tp 2: every TP group spans two nodes, with a warning naming stage and nodes") {
  auto p = placed(actors::place_ranks(2, 2, nodes(4, 1)));
  CHECK(p.slots == std::vector<rank_slot>{{0, 0, "n0", 0}, {0, 1, "n1", 0}, {1, 0, "n2", 0}, {1, 1, "n3", 0}});
  REQUIRE(p.warnings.size() == 2);
  CHECK_MESSAGE(contains(p.warnings[0], "stage 0"), p.warnings[0]);
  CHECK_MESSAGE(contains(p.warnings[0], "'n0', 'n1'"), p.warnings[0]);
  CHECK_MESSAGE(contains(p.warnings[1], "stage 1"), p.warnings[1]);
  CHECK_MESSAGE(contains(p.warnings[1], "'n2', 'n3'"), p.warnings[1]);
}

TEST_CASE("too few devices: the error says what was asked and lists every node") {
  std::vector<node_resources> ns{node("head", 1, "cuda", 40 * gib), node("worker", 2, "cpu", 3 * gib / 2)};
  const std::string err = error_of(actors::place_ranks(2, 2, ns));
  CHECK_MESSAGE(contains(err, "tp 2 × pp 2 = 4 devices"), err);
  CHECK_MESSAGE(contains(err, "the cluster has 3 device(s) on 2 node(s)"), err);
  CHECK_MESSAGE(contains(err, "node 'head' (head.local:29501): 1 cuda device(s), 40.0 GiB free"), err);
  CHECK_MESSAGE(contains(err, "node 'worker' (worker.local:29501): 2 cpu device(s), 1.5 GiB free"), err);
}

TEST_CASE("zero nodes: an error saying no node has joined") {
  const std::string err = error_of(actors::place_ranks(1, 1, {}));
  CHECK_MESSAGE(contains(err, "tp 1 × pp 1 = 1 devices"), err);
  CHECK(
      err ==
      "cannot place tp 1 × pp 1 = 1 devices: the cluster has 0 device(s) on 0 node(s): no node has joined the cluster");
}

TEST_CASE("mixed sizes: the largest node fills first, stages share it while it has room, ties go to the earlier") {
  // small (2), big (4), mid (2): stages 0 and 1 on big, stage 2 on small (tie with mid, earlier), stage 3 on mid.
  std::vector<node_resources> ns{node("small", 2), node("big", 4), node("mid", 2)};
  auto p = placed(actors::place_ranks(2, 4, ns));
  CHECK(p.slots == std::vector<rank_slot>{{0, 0, "big", 0},
                                          {0, 1, "big", 1},
                                          {1, 0, "big", 2},
                                          {1, 1, "big", 3},
                                          {2, 0, "small", 0},
                                          {2, 1, "small", 1},
                                          {3, 0, "mid", 0},
                                          {3, 1, "mid", 1}});
  CHECK(p.warnings.empty());
}

TEST_CASE("mixed sizes: whole TP groups first, one spanning group only for what is left, with its warning") {
  // a (3), b (1), tp 2 pp 2: stage 0 on a; then no node has 2 free: stage 1 spans a's last device and b.
  auto p = placed(actors::place_ranks(2, 2, {node("a", 3), node("b", 1)}));
  CHECK(p.slots == std::vector<rank_slot>{{0, 0, "a", 0}, {0, 1, "a", 1}, {1, 0, "a", 2}, {1, 1, "b", 0}});
  REQUIRE(p.warnings.size() == 1);
  CHECK_MESSAGE(contains(p.warnings[0], "stage 1"), p.warnings[0]);
  CHECK_MESSAGE(contains(p.warnings[0], "'a', 'b'"), p.warnings[0]);
}

TEST_CASE("a node with no devices is skipped, and the placement is the same every time") {
  std::vector<node_resources> ns{node("empty", 0), node("x", 2), node("y", 2)};
  auto first = placed(actors::place_ranks(2, 2, ns));
  CHECK(first.slots == std::vector<rank_slot>{{0, 0, "x", 0}, {0, 1, "x", 1}, {1, 0, "y", 0}, {1, 1, "y", 1}});
  CHECK(placed(actors::place_ranks(2, 2, ns)).slots == first.slots);
}

TEST_CASE("tp or pp below 1 is an error") {
  CHECK(contains(error_of(actors::place_ranks(0, 1, nodes(1, 4))), "at least 1"));
  CHECK(contains(error_of(actors::place_ranks(1, 0, nodes(1, 4))), "at least 1"));
}

// Data-parallel replicas: each replica's ranks are placed on the devices the live replicas leave free.
namespace {

/// `ns` with the devices of `p` marked taken on their nodes (what the agents report once p's workers run).
std::vector<node_resources> taking(std::vector<node_resources> ns, const actors::placement& p) {
  for (const auto& s : p.slots)
    for (auto& n : ns)
      if (n.node_id == s.node_id)
        n.taken_devices.push_back(s.device);
  return ns;
}

}  // namespace

TEST_CASE("dp 2 × tp 2 × pp 2 on two nodes of 4 devices: replica 1 gets the devices replica 0 left free") {
  const auto ns = nodes(2, 4);
  auto r0 = placed(actors::place_ranks(2, 2, ns));
  // Both stages of replica 0 fit on n0 (it stays on the node of the stage before while that has room).
  CHECK(r0.slots == std::vector<rank_slot>{{0, 0, "n0", 0}, {0, 1, "n0", 1}, {1, 0, "n0", 2}, {1, 1, "n0", 3}});
  auto r1 = placed(actors::place_ranks(2, 2, taking(ns, r0)));
  CHECK(r1.slots == std::vector<rank_slot>{{0, 0, "n1", 0}, {0, 1, "n1", 1}, {1, 0, "n1", 2}, {1, 1, "n1", 3}});
  CHECK(r1.warnings.empty());
  // A third replica finds nothing free, and the error says that the devices are taken.
  const std::string err = error_of(actors::place_ranks(2, 2, taking(taking(ns, r0), r1)));
  CHECK_MESSAGE(contains(err, "the cluster has 0 free device(s) on 2 node(s)"), err);
  CHECK_MESSAGE(contains(err, "4 taken by other workers"), err);
}

TEST_CASE("restarting replica 1 while replica 0 holds its devices puts replica 1 back on the free ones") {
  const auto ns = nodes(2, 4);
  auto r0 = placed(actors::place_ranks(2, 2, ns));
  auto r1 = placed(actors::place_ranks(2, 2, taking(ns, r0)));
  // Replica 1 died and its workers were stopped: only replica 0's devices are taken; the restart lands where it was.
  auto again = placed(actors::place_ranks(2, 2, taking(ns, r0)));
  CHECK(again.slots == r1.slots);
}

TEST_CASE("devices taken in the middle of a node are skipped, a partly used node still takes a whole TP group") {
  auto ns = nodes(2, 4);
  ns[0].taken_devices = {1, 2};     // n0 has devices 0 and 3 free
  ns[1].taken_devices = {0, 1, 2};  // n1 has device 3 free
  auto p = placed(actors::place_ranks(2, 1, ns));
  CHECK(p.slots == std::vector<rank_slot>{{0, 0, "n0", 0}, {0, 1, "n0", 3}});
  // Out-of-range and repeated entries are ignored.
  ns[1].taken_devices = {0, 0, 7, -1};
  auto q = placed(actors::place_ranks(2, 2, ns));
  CHECK(q.slots == std::vector<rank_slot>{{0, 0, "n1", 1}, {0, 1, "n1", 2}, {1, 0, "n0", 0}, {1, 1, "n0", 3}});
}

TEST_CASE("a node gone: the replica that lived there is placed on what the other node has free, or refused") {
  const auto ns = nodes(2, 4);
  auto r0 = placed(actors::place_ranks(2, 2, ns));              // on n0
  auto r1 = placed(actors::place_ranks(2, 2, taking(ns, r0)));  // on n1
  REQUIRE(r1.slots.front().node_id == "n1");
  // n0 is gone (and replica 0 with it): replica 0 restarts on n1, which replica 1 fills: refused, naming n1.
  std::vector<node_resources> left{ns[1]};
  const std::string err = error_of(actors::place_ranks(2, 2, taking(left, r1)));
  CHECK_MESSAGE(contains(err, "tp 2 × pp 2 = 4 devices"), err);
  CHECK_MESSAGE(contains(err, "node 'n1'"), err);
  CHECK_FALSE(contains(err, "node 'n0'"));
  // A bigger surviving node takes the restarted replica beside the one it holds.
  std::vector<node_resources> big{node("n1", 8)};
  auto restarted = placed(actors::place_ranks(2, 2, taking(big, r1)));
  CHECK(restarted.slots == std::vector<rank_slot>{{0, 0, "n1", 4}, {0, 1, "n1", 5}, {1, 0, "n1", 6}, {1, 1, "n1", 7}});
}
