// The data-parallel load balancer's choice of replica, as a plain class: the least outstanding work (the tokens
// its running and waiting requests still stand for) by default; with prefix caching, the replica that served the
// longest prefix of the prompt before, unless it is overloaded compared with the least loaded one.
#pragma once

#include "engine/block_hash.hpp"

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace actorllm::detail {

class router {
 public:
  struct options {
    int32_t block_size = 16;      ///< prompt prefixes are remembered in blocks of this many tokens (the KV block size)
    bool prefix_affinity = true;  ///< prefix caching is on: prefer where the prefix was computed
    /// A replica with the prefix is passed over when its outstanding work exceeds the least loaded replica's by
    /// more than this many tokens.
    int64_t affinity_slack = 2048;
    size_t remembered_blocks = 65536;  ///< per replica; the least recently used are forgotten first
  };

  router(int32_t n_replicas, options opts);

  /// The replica for a prompt, among those with serving[r]; `work[r]` is each replica's outstanding work. nullopt
  /// when none serves. Ties go to the replica with fewer requests routed so far, then the lower rank.
  std::optional<int32_t> pick(std::span<const int32_t> prompt, std::span<const int64_t> work,
                              const std::vector<bool>& serving,
                              const std::optional<std::string>& cache_salt = std::nullopt) const;

  /// Records that `prompt` went to `replica` (its full blocks will be in that replica's prefix cache).
  void routed(std::span<const int32_t> prompt, int32_t replica,
              const std::optional<std::string>& cache_salt = std::nullopt);

  /// Forgets what a replica had cached (it was restarted with an empty cache, or its cache was reset).
  void forget(int32_t replica);

  /// Requests routed to each replica since start.
  const std::vector<uint64_t>& routed_counts() const { return counts_; }

  /// The prompt's full blocks as the replicas' prefix caches key them (engine/block_hash.hpp, salt included; the
  /// last token never counts: it is always computed).
  std::vector<engine::block_hash> block_hashes(std::span<const int32_t> prompt,
                                               const std::optional<std::string>& cache_salt = std::nullopt) const;

 private:
  struct lru_set {
    std::list<engine::block_hash> order;  // most recent first
    std::unordered_map<engine::block_hash, std::list<engine::block_hash>::iterator, engine::block_hash_hasher> where;
  };
  /// Leading blocks of `hashes` that `replica` holds.
  size_t matched_blocks(int32_t replica, const std::vector<engine::block_hash>& hashes) const;

  options opts_;
  std::vector<lru_set> cached_;
  std::vector<uint64_t> counts_;
};

}  // namespace actorllm::detail
