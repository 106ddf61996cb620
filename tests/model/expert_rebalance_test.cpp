// Expert-parallel load balancing's placement algorithm (model/expert_rebalance): its parts on cases worked out by
// hand, the invariants of every placement on random loads, and the balance it reaches on skewed loads.
#include "model/expert_rebalance.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

using namespace actorllm::model;

namespace {

/// Every placement's invariants: n_physical slots, each holding a logical expert; every logical expert has at least
/// one replica, log_count counts them, and their replica indices are 0 .. count - 1.
void check_invariants(const layer_placement& p, int64_t n_logical, int64_t n_physical) {
  REQUIRE(static_cast<int64_t>(p.phys_to_log.size()) == n_physical);
  REQUIRE(static_cast<int64_t>(p.replica.size()) == n_physical);
  REQUIRE(static_cast<int64_t>(p.log_count.size()) == n_logical);
  std::vector<std::vector<int32_t>> replicas(static_cast<size_t>(n_logical));
  for (int64_t slot = 0; slot < n_physical; ++slot) {
    const int32_t e = p.phys_to_log[static_cast<size_t>(slot)];
    REQUIRE(e >= 0);
    REQUIRE(e < n_logical);
    replicas[static_cast<size_t>(e)].push_back(p.replica[static_cast<size_t>(slot)]);
  }
  for (int64_t e = 0; e < n_logical; ++e) {
    auto& r = replicas[static_cast<size_t>(e)];
    CHECK(!r.empty());
    CHECK(static_cast<int64_t>(r.size()) == p.log_count[static_cast<size_t>(e)]);
    std::sort(r.begin(), r.end());
    for (size_t i = 0; i < r.size(); ++i)
      CHECK(r[i] == static_cast<int32_t>(i));
  }
}

/// A Zipf-like load: expert order[i] gets scale / (i + 1)^s, order a random permutation (or the identity, which
/// puts the hottest experts side by side: on the first rank of the initial placement).
std::vector<double> zipf_load(int64_t n, double s, double scale, std::mt19937& rng, bool shuffled = true) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  if (shuffled)
    std::shuffle(order.begin(), order.end(), rng);
  std::vector<double> load(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    load[static_cast<size_t>(order[static_cast<size_t>(i)])] = std::floor(scale / std::pow(double(i + 1), s));
  return load;
}

}  // namespace

TEST_CASE("balanced_packing: heaviest first into the lightest pack with room, one item per pack as is") {
  const std::vector<double> w{4, 3, 2, 1};
  const packing p = balanced_packing(w, 2);
  // 4 -> pack 0; 3 -> pack 1; 2 -> pack 1 (3 < 4); 1 -> pack 0 (4 < 5): both packs weigh 5.
  CHECK(p.pack_of == std::vector<int32_t>{0, 1, 1, 0});
  CHECK(p.rank_in_pack == std::vector<int32_t>{0, 0, 1, 1});
  const packing one = balanced_packing(w, 4);
  CHECK(one.pack_of == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(one.rank_in_pack == std::vector<int32_t>{0, 0, 0, 0});
  // Equal weights: ties go to the lower item, then the lower pack.
  const packing ties = balanced_packing(std::vector<double>{1, 1, 1, 1, 1, 1}, 3);
  CHECK(ties.pack_of == std::vector<int32_t>{0, 1, 2, 0, 1, 2});
  CHECK_THROWS_AS(balanced_packing(w, 3), std::invalid_argument);
}

TEST_CASE("replicate_experts: each redundant slot copies the expert with the most load per replica") {
  const replication r = replicate_experts(std::vector<double>{10, 1, 4}, 5);
  // slot 3: 10 / 1 is the most -> expert 0 (now 5 per replica); slot 4: 5 > 4 -> expert 0 again.
  CHECK(r.phys_to_log == std::vector<int32_t>{0, 1, 2, 0, 0});
  CHECK(r.replica == std::vector<int32_t>{0, 0, 0, 1, 2});
  CHECK(r.log_count == std::vector<int32_t>{3, 1, 1});
  const replication none = replicate_experts(std::vector<double>{1, 2}, 2);
  CHECK(none.phys_to_log == std::vector<int32_t>{0, 1});
  CHECK(none.log_count == std::vector<int32_t>{1, 1});
  CHECK_THROWS_AS(replicate_experts(std::vector<double>{1, 2, 3}, 2), std::invalid_argument);
}

TEST_CASE("rebalance_experts, global policy: a hand-computed placement of one hot expert over 2 ranks") {
  // Replicas: expert 0 gets both redundant slots (90, then 45 > 10): slot loads 30 10 10 10 30 30. Packed 3 per
  // rank, heaviest first: slots 0 4 5 -> ranks 0 1 0, then 1 2 3 -> ranks 1 1 0.
  const auto p = rebalance_experts({{90, 10, 10, 10}}, 6, 1, 1, 2);
  REQUIRE(p.size() == 1);
  CHECK(p[0].phys_to_log == std::vector<int32_t>{0, 0, 3, 0, 1, 2});
  CHECK(p[0].replica == std::vector<int32_t>{0, 2, 0, 1, 0, 0});
  CHECK(p[0].log_count == std::vector<int32_t>{3, 1, 1, 1});
  const std::vector<double> load{90, 10, 10, 10};
  CHECK(tokens_per_rank(load, p[0], 2) == std::vector<double>{70, 50});
  // Groups that do not divide by the nodes (3 groups, 2 nodes): the global policy, the same answer.
  CHECK(rebalance_experts({{90, 10, 10, 10, 0, 0}}, 6, 3, 2, 2)[0].log_count.size() == 6);
}

TEST_CASE("rebalance_experts, hierarchical policy: expert groups stay on their node, replicas within it") {
  // 2 groups of 2 experts on 2 nodes of one rank each: group 0 (load 3) on node 0, group 1 (17) on node 1; each node
  // has 3 slots, its one redundant slot copying its own hotter expert (1 and 3), never one of the other node's.
  const auto p = rebalance_experts({{1, 2, 8, 9}}, 6, 2, 2, 2);
  REQUIRE(p.size() == 1);
  CHECK(p[0].phys_to_log == std::vector<int32_t>{0, 1, 1, 2, 3, 3});
  CHECK(p[0].replica == std::vector<int32_t>{0, 0, 1, 0, 0, 1});
  CHECK(p[0].log_count == std::vector<int32_t>{1, 2, 1, 2});
  // The global policy of the same load copies the two hottest experts, wherever their groups are.
  const auto g = rebalance_experts({{1, 2, 8, 9}}, 6, 1, 1, 2);
  CHECK(g[0].log_count == std::vector<int32_t>{1, 1, 2, 2});
}

TEST_CASE("rebalance_experts: every layer's placement keeps the invariants, on random loads and layouts") {
  std::mt19937 rng{7};
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n_ranks = int64_t{1} << (trial % 4);  // 1, 2, 4, 8
    const int64_t n_logical = n_ranks * (1 + static_cast<int64_t>(rng() % 4));
    const int64_t n_physical = n_logical + n_ranks * static_cast<int64_t>(rng() % 3);
    const int64_t n_groups = (trial % 3 == 0 && n_logical % 2 == 0) ? 2 : 1;
    const int64_t n_nodes = (trial % 5 == 0 && n_ranks % 2 == 0) ? 2 : 1;
    std::vector<std::vector<double>> load(3);
    for (auto& w : load)
      w = zipf_load(n_logical, 0.5 + static_cast<double>(rng() % 100) / 50.0, 1000.0, rng);
    INFO(fmt::format("{} ranks, {} logical, {} physical, {} groups, {} nodes", n_ranks, n_logical, n_physical, n_groups,
                     n_nodes));
    const auto placements = rebalance_experts(load, n_physical, n_groups, n_nodes, n_ranks);
    REQUIRE(placements.size() == load.size());
    for (size_t l = 0; l < load.size(); ++l) {
      check_invariants(placements[l], n_logical, n_physical);
      // All the load is served: the ranks' shares add up to it.
      const auto per_rank = tokens_per_rank(load[l], placements[l], n_ranks);
      double total = 0, served = 0;
      for (double x : load[l])
        total += x;
      for (double x : per_rank)
        served += x;
      CHECK(served == doctest::Approx(total));
    }
    // A pure function: the same load gives the same placement (every rank computes it alone).
    const auto again = rebalance_experts(load, n_physical, n_groups, n_nodes, n_ranks);
    for (size_t l = 0; l < load.size(); ++l)
      CHECK(again[l].phys_to_log == placements[l].phys_to_log);
  }
}

TEST_CASE("initial_placement: slot i holds expert i mod n_logical, vLLM's start") {
  const layer_placement p = initial_placement(4, 6);
  CHECK(p.phys_to_log == std::vector<int32_t>{0, 1, 2, 3, 0, 1});
  CHECK(p.replica == std::vector<int32_t>{0, 0, 0, 0, 1, 1});
  CHECK(p.log_count == std::vector<int32_t>{2, 2, 1, 1});
  check_invariants(p, 4, 6);
}

TEST_CASE("rebalance_experts: skewed loads over 4 ranks go from their measured imbalance to max/mean within 1.2") {
  // 16 experts, 4 redundant slots, 4 ranks (5 slots each), routing concentrated on a few experts: the hottest side
  // by side (on rank 0 at first) in layer 0, anywhere in the others.
  std::mt19937 rng{11};
  for (double s : {1.2, 1.5, 2.0}) {
    std::vector<std::vector<double>> load(4);
    for (size_t l = 0; l < load.size(); ++l)
      load[l] = zipf_load(16, s, 100000.0, rng, l > 0);
    const auto placements = rebalance_experts(load, 20, 1, 1, 4);
    for (size_t l = 0; l < load.size(); ++l) {
      const double before = max_over_mean(tokens_per_rank(load[l], initial_placement(16, 20), 4));
      const double after = max_over_mean(tokens_per_rank(load[l], placements[l], 4));
      INFO(fmt::format("zipf s {} layer {}: max/mean {:.3f} -> {:.3f}", s, l, before, after));
      CHECK(before > 1.25);
      CHECK(after <= 1.2);
      CHECK(after < before);
    }
  }
  CHECK(max_over_mean(std::vector<double>{1, 1, 1, 1}) == 1.0);
  CHECK(max_over_mean(std::vector<double>{4, 0, 0, 0}) == 4.0);
  CHECK(max_over_mean(std::vector<double>{0, 0}) == 1.0);
}

TEST_CASE("rebalance_experts refuses layouts that cannot hold the experts, naming the numbers") {
  CHECK_THROWS_WITH_AS(rebalance_experts({{1, 2, 3, 4}}, 6, 1, 1, 4), doctest::Contains("6 physical slots"),
                       std::invalid_argument);
  CHECK_THROWS_AS(rebalance_experts({{1, 2, 3, 4}}, 2, 1, 1, 2), std::invalid_argument);
  CHECK_THROWS_AS(rebalance_experts({{1, 2, 3, 4}, {1, 2}}, 4, 1, 1, 2), std::invalid_argument);
  CHECK_THROWS_AS(rebalance_experts({{1, 2, 3, 4}}, 4, 3, 1, 2), std::invalid_argument);
}
