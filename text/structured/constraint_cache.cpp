// The compiled-constraint cache and the process's instance of it.
#include "text/structured/constraint_cache.hpp"

#include <algorithm>
#include <functional>
#include <map>

namespace actorllm::text::structured {

constraint_cache::constraint_cache(std::size_t max_bytes, std::size_t max_entries)
    : max_bytes_(max_bytes), max_entries_(std::max<std::size_t>(max_entries, 1)) {}

std::size_t constraint_cache::key_hash::operator()(const key& k) const {
  const std::size_t a = std::hash<std::string>{}(k.first);
  return a ^ (std::hash<std::string>{}(k.second) + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
}

std::shared_ptr<const token_constraint> constraint_cache::get(const std::string& tokenizer_dir,
                                                              const std::string& pattern,
                                                              const std::shared_ptr<const vocab_index>& vocab,
                                                              const structured_limits& limits) {
  key k{tokenizer_dir, pattern};
  {
    std::lock_guard lock{mutex_};
    if (auto it = slots_.find(k); it != slots_.end()) {
      if (auto c = it->second.alive.lock()) {
        keep(it->first, it->second, c);
        return c;
      }
      slots_.erase(it);
    }
  }
  // Outside the lock: other patterns' lookups and compilations go on meanwhile.
  auto c = std::make_shared<const token_constraint>(byte_dfa::compile(pattern, limits), vocab);
  std::lock_guard lock{mutex_};
  auto [it, fresh] = slots_.try_emplace(std::move(k), slot{{}, lru_.end()});
  if (!fresh)
    if (auto other = it->second.alive.lock()) {  // another thread compiled the same pattern meanwhile: share it
      keep(it->first, it->second, other);
      return other;
    }
  it->second.alive = c;
  keep(it->first, it->second, c);
  return c;
}

void constraint_cache::keep(const key& k, slot& s, const std::shared_ptr<const token_constraint>& c) {
  if (s.kept != lru_.end()) {
    lru_.splice(lru_.begin(), lru_, s.kept);
  } else {
    lru_.push_front({&k, c});
    s.kept = lru_.begin();
  }
  evict();
}

void constraint_cache::evict() {
  // Masks grow while constraints are used: count anew (the entry count bounds this loop).
  auto bytes_of = [](const kept_entry& e) { return e.constraint->memory_bytes() + e.k->second.size(); };
  bytes_ = 0;
  for (const kept_entry& e : lru_)
    bytes_ += bytes_of(e);
  while (lru_.size() > 1 && (lru_.size() > max_entries_ || bytes_ > max_bytes_)) {
    const kept_entry& last = lru_.back();
    bytes_ -= bytes_of(last);
    slots_.find(*last.k)->second.kept = lru_.end();
    lru_.pop_back();
  }
  // Evicted slots whose constraint is gone: forget them once they outnumber the kept ones.
  if (slots_.size() > 2 * lru_.size() + 64)
    std::erase_if(slots_, [&](const auto& kv) { return kv.second.kept == lru_.end() && kv.second.alive.expired(); });
}

std::size_t constraint_cache::size() const {
  std::lock_guard lock{mutex_};
  return lru_.size();
}

std::size_t constraint_cache::bytes() const {
  std::lock_guard lock{mutex_};
  return bytes_;
}

namespace {

std::shared_ptr<const vocab_index> vocab_of(const std::string& tokenizer_dir) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const vocab_index>> vocabs;  // one per tokenizer the server loads
  std::lock_guard lock{mutex};
  auto& vocab = vocabs[tokenizer_dir];
  if (!vocab)
    vocab = vocab_index::from_tokenizer(tokenizer::from_directory(tokenizer_dir));
  return vocab;
}

}  // namespace

std::shared_ptr<const token_constraint> compiled_constraint(const std::string& tokenizer_dir,
                                                            const std::string& pattern,
                                                            const structured_limits& limits) {
  static constraint_cache cache{256u << 20, 1024};
  return cache.get(tokenizer_dir, pattern, vocab_of(tokenizer_dir), limits);
}

}  // namespace actorllm::text::structured
