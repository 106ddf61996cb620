// The paged KV-cache block pool: which physical blocks each sequence's token slots live in, shared between
// sequences by reference count, and the prefix cache: full blocks whose KV has been computed are registered under
// their chained hash (engine/block_hash.hpp) and stay reusable after their last holder lets go, until evicted least
// recently used first.
#pragma once

#include "engine/block_hash.hpp"
#include "engine/expected.hpp"
#include "engine/seq_id.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace actorllm::engine {

/// Index of a physical KV-cache block, as it appears in model::batch_sequence::block_table.
using block_id = int32_t;

/// A pool of `n_blocks` blocks of `block_size` token slots and the block table of every live sequence.
///
/// Sequences only ever append: block i of a table holds positions [i * block_size, (i + 1) * block_size), and only
/// the last block can be partially filled. Only full blocks are ever shared (a cache hit, or the siblings of an
/// n > 1 request taking their prompt's full blocks), so no block is written while another table reads it and no
/// block needs copying. Every block is in exactly one state: held (reference count > 0), free and empty, or free
/// and cached (its hash registered, content intact, evictable). Every mutating call either succeeds completely or
/// changes nothing and returns an error.
class block_allocator {
 public:
  /// A pool of `n_blocks` (>= 1) blocks of `block_size` (>= 1) slots; every block starts free. With
  /// `enable_caching` false, cache_blocks registers nothing and find_cached_prefix finds nothing.
  block_allocator(int32_t n_blocks, int32_t block_size, bool enable_caching = true);

  /// Number of blocks in the pool.
  int32_t n_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  /// Token slots per block.
  int32_t block_size() const { return block_size_; }
  /// Whether full blocks are registered for reuse.
  bool caching_enabled() const { return caching_enabled_; }
  /// Blocks no sequence holds: empty ones and cached ones (which an allocation evicts when it needs them).
  int32_t n_free_blocks() const { return static_cast<int32_t>(empty_blocks_.size()) + n_evictable_; }
  /// Free blocks that still hold registered content (reusable by a cache hit until evicted).
  int32_t n_evictable_blocks() const { return n_evictable_; }
  /// Blocks registered in the cache, held or free.
  int32_t n_cached_blocks() const { return static_cast<int32_t>(cached_.size()); }
  /// Fraction of blocks held by sequences, in [0, 1] (the kv_cache_usage_perc metric; cached free blocks count
  /// as free, as vLLM counts them).
  double usage() const;

  /// Whether `seq` holds a block table (possibly empty, after append_slots(seq, 0)).
  bool contains(seq_id seq) const { return tables_.contains(seq); }
  /// Token slots reserved for `seq`; 0 for a sequence the pool does not hold.
  int64_t n_tokens(seq_id seq) const;
  /// The block table of `seq`; empty for a sequence the pool does not hold.
  std::span<const block_id> block_table(seq_id seq) const;
  /// How many block tables hold `block` (0 for a free block).
  int32_t ref_count(block_id block) const;
  /// The hash `block` is registered under; nullopt when it is not cached (or outside the pool).
  std::optional<block_hash> hash_of(block_id block) const;
  /// Number of live sequences.
  size_t n_sequences() const { return tables_.size(); }

  /// The blocks of the longest leading run of `hashes` that the cache holds, in order (empty when caching is off).
  std::vector<block_id> find_cached_prefix(std::span<const block_hash> hashes) const;

  /// Free blocks that append_slots(seq, n_new_tokens) would take. A sequence the pool does not hold counts as empty.
  int64_t blocks_needed(seq_id seq, int64_t n_new_tokens) const;
  /// Whether append_slots(seq, n_new_tokens) would succeed now.
  bool can_append(seq_id seq, int64_t n_new_tokens) const;
  /// Free blocks that start_sequence(seq, prefix, n_new_tokens) would take: the new blocks, plus the blocks of
  /// `prefix` that are free now (cached but unheld: taking them removes them from the free pool).
  int64_t blocks_needed_to_start(std::span<const block_id> prefix, int64_t n_new_tokens) const;
  /// Whether start_sequence(seq, prefix, n_new_tokens) would find the blocks it needs (the other checks are its).
  bool can_start(std::span<const block_id> prefix, int64_t n_new_tokens) const;

  /// Creates the table of a sequence the pool does not hold: it shares the full blocks `prefix` (each held by some
  /// table, or free and cached: a cache hit), then reserves slots for `n_new_tokens` more tokens. Errors: the
  /// sequence exists already, a prefix block that is free and not cached (its content is gone) or outside the pool,
  /// out_of_blocks.
  expected<void> start_sequence(seq_id seq, std::span<const block_id> prefix, int64_t n_new_tokens);

  /// Reserves slots for `n_new_tokens` more tokens of `seq` (creating its table if the pool does not hold it yet).
  /// out_of_blocks (and no change) when the pool is short.
  expected<void> append_slots(seq_id seq, int64_t n_new_tokens);

  /// Registers the first hashes.size() blocks of `seq`, which must be full and whose KV must be computed, under
  /// `hashes` (their chained digests). Blocks registered before are skipped; a block whose hash another block
  /// already holds stays unregistered (a duplicate: it is simply not reusable). A no-op when caching is off.
  /// Errors: an unknown sequence, more hashes than full blocks, or a block already registered under another hash.
  expected<void> cache_blocks(seq_id seq, std::span<const block_hash> hashes);

  /// Drops `seq`'s table at once; each of its blocks is free when no other table holds it (cached blocks stay
  /// reusable, its last blocks first in line for eviction). Errors for a sequence the pool does not hold (never
  /// allocated, or already freed: a double free).
  expected<void> free(seq_id seq);

  /// Forgets every registered hash: no block is reused from before this call. Held blocks keep their content and
  /// holders; cached free blocks become empty free blocks. Returns how many blocks were registered.
  int32_t reset_cache();

  /// Empty when the pool is consistent; otherwise the first violation found: a reference count that differs from
  /// the number of tables holding the block, a block both free and held, a free block on both or neither free list,
  /// a cached block that is not full in a table holding it, a shared partial block, a hash map entry that does not
  /// match its block. O(n_blocks + total table length); meant for tests and debug checks.
  std::string check_invariants() const;

 private:
  struct table {
    std::vector<block_id> blocks;
    int64_t n_tokens = 0;
    size_t n_registered = 0;  ///< leading blocks cache_blocks has seen
  };

  block_id take_free_block();
  void acquire(block_id block);
  void release(block_id block);
  void lru_push_back(block_id block);
  void lru_remove(block_id block);
  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }
  bool is_cached(block_id block) const { return registered_[static_cast<size_t>(block)] != 0; }

  int32_t block_size_;
  bool caching_enabled_;
  std::vector<int32_t> ref_counts_;
  /// Free blocks with nothing worth keeping, as a stack: the most recently freed is reused first, which keeps the
  /// set of hot blocks small. They go before any cached block is evicted.
  std::vector<block_id> empty_blocks_;
  /// Free cached blocks as an intrusive doubly linked list in eviction order (least recently freed at the head).
  std::vector<block_id> lru_prev_, lru_next_;
  block_id lru_head_ = -1, lru_tail_ = -1;
  int32_t n_evictable_ = 0;
  /// Per block: registered under block_hashes_[block] (uint8_t, not vector<bool>: read in hot loops).
  std::vector<uint8_t> registered_;
  std::vector<block_hash> block_hashes_;
  std::unordered_map<block_hash, block_id, block_hash_hasher> cached_;
  std::map<seq_id, table> tables_;
};

}  // namespace actorllm::engine
