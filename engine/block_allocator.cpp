// The paged KV-cache block pool.
#include "engine/block_allocator.hpp"

#include "util/check.hpp"

#include <fmt/format.h>

namespace actorllm::engine {

block_allocator::block_allocator(int32_t n_blocks, int32_t block_size) : block_size_(block_size) {
  ACTORLLM_CHECK(n_blocks >= 1, "a KV cache needs at least one block");
  ACTORLLM_CHECK(block_size >= 1, "a KV-cache block needs at least one slot");
  ref_counts_.assign(static_cast<size_t>(n_blocks), 0);
  free_blocks_.reserve(static_cast<size_t>(n_blocks));
  // Pushed in reverse so that a fresh pool hands out blocks 0, 1, 2, ...: plans are easier to read in tests and logs.
  for (block_id b = n_blocks - 1; b >= 0; --b)
    free_blocks_.push_back(b);
}

double block_allocator::usage() const {
  return static_cast<double>(n_blocks() - n_free_blocks()) / static_cast<double>(n_blocks());
}

int64_t block_allocator::n_tokens(seq_id seq) const {
  auto it = tables_.find(seq);
  return it == tables_.end() ? 0 : it->second.n_tokens;
}

std::span<const block_id> block_allocator::block_table(seq_id seq) const {
  auto it = tables_.find(seq);
  if (it == tables_.end())
    return {};
  return it->second.blocks;
}

int32_t block_allocator::ref_count(block_id block) const {
  if (block < 0 || block >= n_blocks())
    return 0;
  return ref_counts_[static_cast<size_t>(block)];
}

int64_t block_allocator::blocks_needed(seq_id seq, int64_t n_new_tokens) const {
  if (n_new_tokens <= 0)
    return 0;
  auto it = tables_.find(seq);
  if (it == tables_.end())
    return blocks_for(n_new_tokens);
  const table& t = it->second;
  int64_t fresh = blocks_for(t.n_tokens + n_new_tokens) - static_cast<int64_t>(t.blocks.size());
  bool writes_shared_tail = t.n_tokens % block_size_ != 0 && ref_count(t.blocks.back()) > 1;
  return fresh + (writes_shared_tail ? 1 : 0);
}

bool block_allocator::can_append(seq_id seq, int64_t n_new_tokens) const {
  return blocks_needed(seq, n_new_tokens) <= n_free_blocks();
}

expected<std::optional<block_copy>> block_allocator::append_slots(seq_id seq, int64_t n_new_tokens) {
  if (n_new_tokens < 0)
    return engine_error{engine_errc::invalid_argument,
                        fmt::format("append_slots({}, {}): negative token count", to_string(seq), n_new_tokens)};
  int64_t needed = blocks_needed(seq, n_new_tokens);
  if (needed > n_free_blocks())
    return engine_error{engine_errc::out_of_blocks,
                        fmt::format("sequence {} needs {} more blocks for {} tokens but only {} of {} are free",
                                    to_string(seq), needed, n_new_tokens, n_free_blocks(), n_blocks())};
  table& t = tables_[seq];
  std::optional<block_copy> copy;
  if (n_new_tokens > 0 && t.n_tokens % block_size_ != 0 && ref_count(t.blocks.back()) > 1) {
    // The write lands in a partial block other tables still read: give this sequence its own copy to write into.
    block_id shared = t.blocks.back();
    block_id own = take_free_block();
    release(shared);
    t.blocks.back() = own;
    copy = block_copy{shared, own};
  }
  t.n_tokens += n_new_tokens;
  while (static_cast<int64_t>(t.blocks.size()) < blocks_for(t.n_tokens))
    t.blocks.push_back(take_free_block());
  return copy;
}

expected<void> block_allocator::fork(seq_id parent, seq_id child) {
  auto it = tables_.find(parent);
  if (it == tables_.end())
    return engine_error{engine_errc::unknown_sequence,
                        fmt::format("fork({} -> {}): the parent holds no blocks", to_string(parent), to_string(child))};
  if (tables_.contains(child))
    return engine_error{engine_errc::sequence_exists, fmt::format("fork({} -> {}): the child already holds blocks",
                                                                  to_string(parent), to_string(child))};
  table copy = it->second;
  for (block_id b : copy.blocks)
    ++ref_counts_[static_cast<size_t>(b)];
  tables_.emplace(child, std::move(copy));
  return {};
}

expected<void> block_allocator::free(seq_id seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end())
    return engine_error{
        engine_errc::unknown_sequence,
        fmt::format("free({}): the sequence holds no blocks (never allocated, or already freed)", to_string(seq))};
  for (block_id b : it->second.blocks)
    release(b);
  tables_.erase(it);
  return {};
}

block_id block_allocator::take_free_block() {
  ACTORLLM_CHECK(!free_blocks_.empty(), "take_free_block on an empty pool: blocks_needed was not honoured");
  block_id b = free_blocks_.back();
  free_blocks_.pop_back();
  ACTORLLM_CHECK(ref_counts_[static_cast<size_t>(b)] == 0, "a block on the free list is still referenced");
  ref_counts_[static_cast<size_t>(b)] = 1;
  return b;
}

void block_allocator::release(block_id block) {
  int32_t& rc = ref_counts_[static_cast<size_t>(block)];
  ACTORLLM_CHECK(rc > 0, "releasing a block nobody holds");
  if (--rc == 0)
    free_blocks_.push_back(block);
}

std::string block_allocator::check_invariants() const {
  std::vector<int32_t> held(ref_counts_.size(), 0);
  for (const auto& [seq, t] : tables_) {
    if (static_cast<int64_t>(t.blocks.size()) != blocks_for(t.n_tokens))
      return fmt::format("sequence {} has {} blocks for {} tokens (block size {})", to_string(seq), t.blocks.size(),
                         t.n_tokens, block_size_);
    for (block_id b : t.blocks) {
      if (b < 0 || b >= n_blocks())
        return fmt::format("sequence {} holds block {} outside the pool of {}", to_string(seq), b, n_blocks());
      ++held[static_cast<size_t>(b)];
    }
  }
  std::vector<bool> is_free(ref_counts_.size(), false);
  for (block_id b : free_blocks_) {
    if (b < 0 || b >= n_blocks())
      return fmt::format("free list holds block {} outside the pool of {}", b, n_blocks());
    if (is_free[static_cast<size_t>(b)])
      return fmt::format("block {} is on the free list twice", b);
    is_free[static_cast<size_t>(b)] = true;
  }
  for (size_t b = 0; b < ref_counts_.size(); ++b) {
    if (ref_counts_[b] != held[b])
      return fmt::format("block {} has reference count {} but {} tables hold it", b, ref_counts_[b], held[b]);
    if (is_free[b] == (held[b] > 0))
      return fmt::format("block {} is {} yet held by {} tables", b, is_free[b] ? "free" : "not free", held[b]);
  }
  return {};
}

}  // namespace actorllm::engine
