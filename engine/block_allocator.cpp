// The paged KV-cache block pool and its prefix cache.
#include "engine/block_allocator.hpp"

#include "util/check.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorllm::engine {

block_allocator::block_allocator(int32_t n_blocks, int32_t block_size, bool enable_caching)
    : block_size_(block_size), caching_enabled_(enable_caching) {
  ACTORLLM_CHECK(n_blocks >= 1, "a KV cache needs at least one block");
  ACTORLLM_CHECK(block_size >= 1, "a KV-cache block needs at least one slot");
  const auto n = static_cast<size_t>(n_blocks);
  ref_counts_.assign(n, 0);
  lru_prev_.assign(n, -1);
  lru_next_.assign(n, -1);
  registered_.assign(n, 0);
  block_hashes_.resize(n);
  empty_blocks_.reserve(n);
  // Pushed in reverse so that a fresh pool hands out blocks 0, 1, 2, ...: plans are easier to read in tests and logs.
  for (block_id b = n_blocks - 1; b >= 0; --b)
    empty_blocks_.push_back(b);
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

std::optional<block_hash> block_allocator::hash_of(block_id block) const {
  if (block < 0 || block >= n_blocks() || !is_cached(block))
    return std::nullopt;
  return block_hashes_[static_cast<size_t>(block)];
}

std::vector<block_id> block_allocator::find_cached_prefix(std::span<const block_hash> hashes) const {
  std::vector<block_id> hit;
  if (!caching_enabled_)
    return hit;
  for (const block_hash& h : hashes) {
    auto it = cached_.find(h);
    if (it == cached_.end())
      break;
    hit.push_back(it->second);
  }
  return hit;
}

int64_t block_allocator::blocks_needed(seq_id seq, int64_t n_new_tokens) const {
  if (n_new_tokens <= 0)
    return 0;
  auto it = tables_.find(seq);
  if (it == tables_.end())
    return blocks_for(n_new_tokens);
  const table& t = it->second;
  return blocks_for(t.n_tokens + n_new_tokens) - static_cast<int64_t>(t.blocks.size());
}

bool block_allocator::can_append(seq_id seq, int64_t n_new_tokens) const {
  return blocks_needed(seq, n_new_tokens) <= n_free_blocks();
}

int64_t block_allocator::blocks_needed_to_start(std::span<const block_id> prefix, int64_t n_new_tokens) const {
  int64_t needed = n_new_tokens > 0 ? blocks_for(n_new_tokens) : 0;
  for (block_id b : prefix)
    if (ref_count(b) == 0)
      ++needed;
  return needed;
}

bool block_allocator::can_start(std::span<const block_id> prefix, int64_t n_new_tokens) const {
  return blocks_needed_to_start(prefix, n_new_tokens) <= n_free_blocks();
}

expected<void> block_allocator::start_sequence(seq_id seq, std::span<const block_id> prefix, int64_t n_new_tokens) {
  if (n_new_tokens < 0)
    return engine_error{engine_errc::invalid_argument,
                        fmt::format("start_sequence({}, {}): negative token count", to_string(seq), n_new_tokens)};
  if (tables_.contains(seq))
    return engine_error{engine_errc::sequence_exists,
                        fmt::format("start_sequence({}): the sequence already holds blocks", to_string(seq))};
  for (block_id b : prefix) {
    if (b < 0 || b >= n_blocks())
      return engine_error{
          engine_errc::invalid_argument,
          fmt::format("start_sequence({}): prefix block {} is outside the pool of {}", to_string(seq), b, n_blocks())};
    if (ref_count(b) == 0 && !is_cached(b))
      return engine_error{engine_errc::invalid_argument,
                          fmt::format("start_sequence({}): prefix block {} is free and cached by nobody, so its "
                                      "content is gone",
                                      to_string(seq), b)};
  }
  const int64_t needed = blocks_needed_to_start(prefix, n_new_tokens);
  if (needed > n_free_blocks())
    return engine_error{engine_errc::out_of_blocks,
                        fmt::format("sequence {} needs {} more blocks for {} tokens but only {} of {} are free",
                                    to_string(seq), needed, n_new_tokens, n_free_blocks(), n_blocks())};
  table& t = tables_[seq];
  // The shared blocks first: taking a cached free block out of the eviction list before allocating the new ones
  // keeps those from evicting it.
  for (block_id b : prefix) {
    acquire(b);
    t.blocks.push_back(b);
  }
  t.n_tokens = static_cast<int64_t>(prefix.size()) * block_size_ + n_new_tokens;
  while (static_cast<int64_t>(t.blocks.size()) < blocks_for(t.n_tokens))
    t.blocks.push_back(take_free_block());
  return {};
}

expected<void> block_allocator::append_slots(seq_id seq, int64_t n_new_tokens) {
  if (n_new_tokens < 0)
    return engine_error{engine_errc::invalid_argument,
                        fmt::format("append_slots({}, {}): negative token count", to_string(seq), n_new_tokens)};
  int64_t needed = blocks_needed(seq, n_new_tokens);
  if (needed > n_free_blocks())
    return engine_error{engine_errc::out_of_blocks,
                        fmt::format("sequence {} needs {} more blocks for {} tokens but only {} of {} are free",
                                    to_string(seq), needed, n_new_tokens, n_free_blocks(), n_blocks())};
  table& t = tables_[seq];
  // Only full blocks are ever shared, so the partial last block written here is this table's own.
  ACTORLLM_DCHECK(t.n_tokens % block_size_ == 0 || ref_count(t.blocks.back()) == 1, "a shared block is written");
  t.n_tokens += n_new_tokens;
  while (static_cast<int64_t>(t.blocks.size()) < blocks_for(t.n_tokens))
    t.blocks.push_back(take_free_block());
  return {};
}

expected<void> block_allocator::cache_blocks(seq_id seq, std::span<const block_hash> hashes) {
  auto it = tables_.find(seq);
  if (it == tables_.end())
    return engine_error{engine_errc::unknown_sequence,
                        fmt::format("cache_blocks({}): the sequence holds no blocks", to_string(seq))};
  table& t = it->second;
  const auto n_full = static_cast<size_t>(t.n_tokens / block_size_);
  if (hashes.size() > n_full)
    return engine_error{
        engine_errc::invalid_argument,
        fmt::format("cache_blocks({}): {} hashes but only {} full blocks", to_string(seq), hashes.size(), n_full)};
  if (!caching_enabled_)
    return {};
  for (size_t i = t.n_registered; i < hashes.size(); ++i) {
    const block_id b = t.blocks[i];
    if (is_cached(b) && block_hashes_[static_cast<size_t>(b)] != hashes[i])
      return engine_error{
          engine_errc::invalid_argument,
          fmt::format("cache_blocks({}): block {} is registered under {} but would now be {}", to_string(seq), b,
                      util::to_hex(block_hashes_[static_cast<size_t>(b)]), util::to_hex(hashes[i]))};
  }
  for (size_t i = t.n_registered; i < hashes.size(); ++i) {
    const block_id b = t.blocks[i];
    if (is_cached(b))
      continue;  // shared with the table that registered it (a cache hit, or an n > 1 sibling)
    if (auto [entry, inserted] = cached_.try_emplace(hashes[i], b); !inserted)
      continue;  // the same content in another block (computed side by side): that one serves the hits
    registered_[static_cast<size_t>(b)] = 1;
    block_hashes_[static_cast<size_t>(b)] = hashes[i];
  }
  t.n_registered = std::max(t.n_registered, hashes.size());
  return {};
}

expected<void> block_allocator::free(seq_id seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end())
    return engine_error{
        engine_errc::unknown_sequence,
        fmt::format("free({}): the sequence holds no blocks (never allocated, or already freed)", to_string(seq))};
  // Last block first: a prefix is worth more than its tail (more requests share it), so the tail is evicted first.
  const auto& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b)
    release(*b);
  tables_.erase(it);
  return {};
}

int32_t block_allocator::reset_cache() {
  const auto n = static_cast<int32_t>(cached_.size());
  while (lru_head_ >= 0) {
    const block_id b = lru_head_;
    lru_remove(b);
    empty_blocks_.push_back(b);
  }
  std::fill(registered_.begin(), registered_.end(), uint8_t{0});
  cached_.clear();
  return n;
}

block_id block_allocator::take_free_block() {
  block_id b = -1;
  if (!empty_blocks_.empty()) {
    b = empty_blocks_.back();
    empty_blocks_.pop_back();
  } else {
    // Evict the least recently freed cached block: its hash goes, so no later lookup finds the content we overwrite.
    ACTORLLM_CHECK(lru_head_ >= 0, "take_free_block on an empty pool: blocks_needed was not honoured");
    b = lru_head_;
    lru_remove(b);
    cached_.erase(block_hashes_[static_cast<size_t>(b)]);
    registered_[static_cast<size_t>(b)] = 0;
  }
  ACTORLLM_CHECK(ref_counts_[static_cast<size_t>(b)] == 0, "a free block is still referenced");
  ref_counts_[static_cast<size_t>(b)] = 1;
  return b;
}

void block_allocator::acquire(block_id block) {
  int32_t& rc = ref_counts_[static_cast<size_t>(block)];
  if (rc == 0) {
    ACTORLLM_CHECK(is_cached(block), "sharing a free block whose content is not cached");
    lru_remove(block);
  }
  ++rc;
}

void block_allocator::release(block_id block) {
  int32_t& rc = ref_counts_[static_cast<size_t>(block)];
  ACTORLLM_CHECK(rc > 0, "releasing a block nobody holds");
  if (--rc > 0)
    return;
  if (is_cached(block))
    lru_push_back(block);
  else
    empty_blocks_.push_back(block);
}

void block_allocator::lru_push_back(block_id block) {
  const auto i = static_cast<size_t>(block);
  lru_prev_[i] = lru_tail_;
  lru_next_[i] = -1;
  if (lru_tail_ >= 0)
    lru_next_[static_cast<size_t>(lru_tail_)] = block;
  else
    lru_head_ = block;
  lru_tail_ = block;
  ++n_evictable_;
}

void block_allocator::lru_remove(block_id block) {
  const auto i = static_cast<size_t>(block);
  const block_id prev = lru_prev_[i], next = lru_next_[i];
  if (prev >= 0)
    lru_next_[static_cast<size_t>(prev)] = next;
  else
    lru_head_ = next;
  if (next >= 0)
    lru_prev_[static_cast<size_t>(next)] = prev;
  else
    lru_tail_ = prev;
  lru_prev_[i] = lru_next_[i] = -1;
  --n_evictable_;
}

std::string block_allocator::check_invariants() const {
  const auto n = ref_counts_.size();
  std::vector<int32_t> held(n, 0);
  std::vector<uint8_t> partial_somewhere(n, 0);
  for (const auto& [seq, t] : tables_) {
    if (static_cast<int64_t>(t.blocks.size()) != blocks_for(t.n_tokens))
      return fmt::format("sequence {} has {} blocks for {} tokens (block size {})", to_string(seq), t.blocks.size(),
                         t.n_tokens, block_size_);
    const auto n_full = static_cast<size_t>(t.n_tokens / block_size_);
    if (t.n_registered > n_full)
      return fmt::format("sequence {} registered {} blocks but has {} full ones", to_string(seq), t.n_registered,
                         n_full);
    for (size_t i = 0; i < t.blocks.size(); ++i) {
      const block_id b = t.blocks[i];
      if (b < 0 || b >= n_blocks())
        return fmt::format("sequence {} holds block {} outside the pool of {}", to_string(seq), b, n_blocks());
      ++held[static_cast<size_t>(b)];
      if (i >= n_full)
        partial_somewhere[static_cast<size_t>(b)] = 1;
    }
  }
  // 0: not on a free list, 1: empty list, 2: eviction list.
  std::vector<uint8_t> on_list(n, 0);
  for (block_id b : empty_blocks_) {
    if (b < 0 || b >= n_blocks())
      return fmt::format("the empty list holds block {} outside the pool of {}", b, n_blocks());
    if (on_list[static_cast<size_t>(b)] != 0)
      return fmt::format("block {} is on the empty list twice", b);
    on_list[static_cast<size_t>(b)] = 1;
    if (is_cached(b))
      return fmt::format("block {} is on the empty list but registered in the cache", b);
  }
  int32_t n_lru = 0;
  block_id prev = -1;
  for (block_id b = lru_head_; b >= 0; b = lru_next_[static_cast<size_t>(b)]) {
    if (b >= n_blocks())
      return fmt::format("the eviction list holds block {} outside the pool of {}", b, n_blocks());
    if (on_list[static_cast<size_t>(b)] != 0)
      return fmt::format("block {} is on the eviction list twice, or on both free lists", b);
    on_list[static_cast<size_t>(b)] = 2;
    if (lru_prev_[static_cast<size_t>(b)] != prev)
      return fmt::format("eviction list: block {} links back to {} instead of {}", b, lru_prev_[static_cast<size_t>(b)],
                         prev);
    if (!is_cached(b))
      return fmt::format("block {} is on the eviction list but not registered in the cache", b);
    prev = b;
    ++n_lru;
  }
  if (prev != lru_tail_)
    return fmt::format("eviction list ends at block {} but its tail is {}", prev, lru_tail_);
  if (n_lru != n_evictable_)
    return fmt::format("eviction list holds {} blocks but counts {}", n_lru, n_evictable_);
  size_t n_registered = 0;
  for (size_t b = 0; b < n; ++b) {
    if (ref_counts_[b] != held[b])
      return fmt::format("block {} has reference count {} but {} tables hold it", b, ref_counts_[b], held[b]);
    if ((on_list[b] != 0) == (held[b] > 0))
      return fmt::format("block {} is {} yet held by {} tables", b, on_list[b] != 0 ? "free" : "not free", held[b]);
    if (held[b] > 1 && partial_somewhere[b])
      return fmt::format("block {} is shared by {} tables but partially filled in one of them", b, held[b]);
    if (registered_[b] != 0) {
      ++n_registered;
      if (partial_somewhere[b])
        return fmt::format("block {} is registered in the cache but partially filled in a table", b);
      auto it = cached_.find(block_hashes_[b]);
      if (it == cached_.end() || it->second != static_cast<block_id>(b))
        return fmt::format("block {} is registered under {}, which the cache maps elsewhere", b,
                           util::to_hex(block_hashes_[b]));
    }
  }
  if (n_registered != cached_.size())
    return fmt::format("the cache maps {} hashes but {} blocks are registered", cached_.size(), n_registered);
  if (!caching_enabled_ && !cached_.empty())
    return fmt::format("caching is off but {} blocks are registered", cached_.size());
  return {};
}

}  // namespace actorllm::engine
