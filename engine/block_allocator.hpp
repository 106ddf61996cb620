// The paged KV-cache block pool: which physical blocks each sequence's token slots live in, shared between
// sequences by reference count (n > 1 shares its prompt) with copy-on-write of a shared, partially filled last block.
#pragma once

#include "engine/expected.hpp"
#include "engine/seq_id.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace actorllm::engine {

/// Index of a physical KV-cache block, as it appears in model::batch_sequence::block_table.
using block_id = int32_t;

/// A block copy the shards must perform before running the step that needs it: copy every layer's K and V of block
/// `src` into block `dst` (copy-on-write of a shared block a sequence is about to write into).
struct block_copy {
  block_id src = 0;  ///< the shared block, left untouched for its other holders
  block_id dst = 0;  ///< the writer's fresh private copy

  friend bool operator==(const block_copy&, const block_copy&) = default;
};

/// A pool of `n_blocks` blocks of `block_size` token slots and the block table of every live sequence.
///
/// Sequences only ever append: block i of a table holds positions [i * block_size, (i + 1) * block_size), and only
/// the last block can be partially filled. Full blocks are therefore never written again and can be shared freely;
/// a shared partial last block is copied on the first append into it. Every mutating call either succeeds
/// completely or changes nothing and returns an error.
class block_allocator {
 public:
  /// A pool of `n_blocks` (>= 1) blocks of `block_size` (>= 1) slots; every block starts free.
  block_allocator(int32_t n_blocks, int32_t block_size);

  /// Number of blocks in the pool.
  int32_t n_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  /// Token slots per block.
  int32_t block_size() const { return block_size_; }
  /// Blocks no sequence holds.
  int32_t n_free_blocks() const { return static_cast<int32_t>(free_blocks_.size()); }
  /// Fraction of blocks in use, in [0, 1] (the kv_cache_usage_perc metric).
  double usage() const;

  /// Whether `seq` holds a block table (possibly empty, after append_slots(seq, 0)).
  bool contains(seq_id seq) const { return tables_.contains(seq); }
  /// Token slots reserved for `seq`; 0 for a sequence the pool does not hold.
  int64_t n_tokens(seq_id seq) const;
  /// The block table of `seq`; empty for a sequence the pool does not hold.
  std::span<const block_id> block_table(seq_id seq) const;
  /// How many block tables hold `block` (0 for a free block).
  int32_t ref_count(block_id block) const;
  /// Number of live sequences.
  size_t n_sequences() const { return tables_.size(); }

  /// Free blocks that append_slots(seq, n_new_tokens) would take, including a copy-on-write copy. A sequence the
  /// pool does not hold counts as empty.
  int64_t blocks_needed(seq_id seq, int64_t n_new_tokens) const;
  /// Whether append_slots(seq, n_new_tokens) would succeed now.
  bool can_append(seq_id seq, int64_t n_new_tokens) const;

  /// Reserves slots for `n_new_tokens` more tokens of `seq` (creating its table if the pool does not hold it yet).
  /// Returns the block copy the shards must perform first when the write lands in a shared partial block;
  /// out_of_blocks (and no change) when the pool is short.
  expected<std::optional<block_copy>> append_slots(seq_id seq, int64_t n_new_tokens);

  /// Makes `child` share every block of `parent` (the n > 1 case: the children of a prompt). Errors when `parent`
  /// is not held or `child` already is.
  expected<void> fork(seq_id parent, seq_id child);

  /// Drops `seq`'s table at once; each of its blocks returns to the pool when no other table holds it. Errors for a
  /// sequence the pool does not hold (never allocated, or already freed: a double free).
  expected<void> free(seq_id seq);

  /// Empty when the pool is consistent; otherwise the first violation found: a reference count that differs from
  /// the number of tables holding the block, a block both free and held, a table whose length does not match its
  /// token count. O(n_blocks + total table length); meant for tests and debug checks.
  std::string check_invariants() const;

 private:
  struct table {
    std::vector<block_id> blocks;
    int64_t n_tokens = 0;
  };

  block_id take_free_block();
  void release(block_id block);
  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }

  int32_t block_size_;
  std::vector<int32_t> ref_counts_;
  /// A stack: the most recently freed block is reused first, which keeps the set of hot blocks small.
  std::vector<block_id> free_blocks_;
  std::map<seq_id, table> tables_;
};

}  // namespace actorllm::engine
