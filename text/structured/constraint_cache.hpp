// The cache of compiled structured-output constraints: one per (tokenizer directory, pattern), shared by every
// request and sequence that uses it. Bounded: past a byte budget (automaton tables plus the token masks computed so
// far) or an entry count, the least recently used constraints are dropped from the cache; a constraint that a
// running request still holds stays alive through its shared_ptr and is found again while it lives, so the engine's
// sampler gets the very constraint the HTTP layer compiled. Compiling runs outside the cache's lock: a slow pattern
// never holds up lookups of others.
#pragma once

#include "text/structured/structured_limits.hpp"
#include "text/structured/token_constraint.hpp"

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace actorllm::text::structured {

/// A least-recently-used cache of compiled constraints (thread-safe).
class constraint_cache {
 public:
  /// At most `max_bytes` of constraints (token_constraint::memory_bytes, masks included) and `max_entries` of them
  /// kept; the newest constraint is kept even when it alone is larger.
  constraint_cache(std::size_t max_bytes, std::size_t max_entries);

  /// The constraint for `pattern` over `vocab` (the vocabulary of `tokenizer_dir`), compiled under `limits` when
  /// no live one exists. Throws regex_error.
  std::shared_ptr<const token_constraint> get(const std::string& tokenizer_dir, const std::string& pattern,
                                              const std::shared_ptr<const vocab_index>& vocab,
                                              const structured_limits& limits);

  /// Constraints kept (not counting evicted ones that requests still hold).
  std::size_t size() const;
  /// Their bytes, as last counted.
  std::size_t bytes() const;

 private:
  using key = std::pair<std::string, std::string>;  // (tokenizer directory, pattern)
  struct key_hash {
    std::size_t operator()(const key& k) const;
  };
  struct kept_entry {
    const key* k;  // the slot's key (unordered_map keys never move)
    std::shared_ptr<const token_constraint> constraint;
  };
  struct slot {
    std::weak_ptr<const token_constraint> alive;
    std::list<kept_entry>::iterator kept;  // lru_.end(): evicted (alive only while a request holds it)
  };

  void keep(const key& k, slot& s, const std::shared_ptr<const token_constraint>& c);
  void evict();

  const std::size_t max_bytes_;
  const std::size_t max_entries_;
  mutable std::mutex mutex_;
  std::list<kept_entry> lru_;  // most recently used first
  std::unordered_map<key, slot, key_hash> slots_;
  std::size_t bytes_ = 0;
};

/// The process's compiled constraint for `pattern` over the tokenizer in `tokenizer_dir` (a cache of 256 MiB and
/// 1024 constraints; vocabularies loaded once per directory). Throws regex_error (pattern) or tokenizer_error
/// (directory).
std::shared_ptr<const token_constraint> compiled_constraint(const std::string& tokenizer_dir,
                                                            const std::string& pattern,
                                                            const structured_limits& limits = {});

}  // namespace actorllm::text::structured
