// Open-addressing hash tables for the two hot lookups of BPE encoding: token spelling -> id and
// (left id, right id) -> merge. std::unordered_map costs a node allocation and pointer chase per entry; these are
// flat arrays probed linearly, built once at load and then only read (safe to share between threads).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::text {

/// A fast non-cryptographic 64-bit hash of a byte string.
inline uint64_t hash_bytes(std::string_view s) {
  constexpr uint64_t k0 = 0x9E3779B97F4A7C15ull;
  constexpr uint64_t k1 = 0xBF58476D1CE4E5B9ull;
  uint64_t h = k0 ^ (s.size() * k1);
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t v = 0;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * k1;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * k1;
    h ^= h >> 31;
  }
  h *= k0;
  return h ^ (h >> 29);
}

/// Maps token spellings to ids. Owns a copy of every key.
class token_id_table {
 public:
  /// Prepares for about `n` keys (the table grows on its own too).
  void reserve(size_t n);
  /// Sets the id of `key`, replacing an earlier one (a later duplicate wins, as in a JSON object).
  void insert_or_assign(std::string_view key, int32_t id);
  /// The id of `key`, or -1.
  int32_t find(std::string_view key) const {
    if (slots_.empty())
      return -1;
    const uint64_t h = hash_bytes(key);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.id < 0)
        return -1;
      if (s.tag == tag && s.length == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
        return s.id;
    }
  }
  size_t size() const { return count_; }

 private:
  struct slot {
    uint32_t offset = 0;
    uint32_t length = 0;
    uint32_t tag = 0;
    int32_t id = -1;  // -1 marks an empty slot
  };
  void rehash(size_t capacity);
  std::string arena_;
  std::vector<slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
};

/// Maps an adjacent pair of token ids to its merge: rank (priority, lower first) and the merged token's id.
class merge_table {
 public:
  struct merge {
    uint32_t rank;
    int32_t id;
  };
  void reserve(size_t n);
  /// Sets the merge for (left, right); a later duplicate replaces an earlier one, as HF's HashMap collect does.
  void insert_or_assign(int32_t left, int32_t right, merge m);
  /// The merge of (left, right), or nullptr.
  const merge* find(int32_t left, int32_t right) const {
    if (slots_.empty())
      return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.key == key)
        return &s.value;
      if (s.key == empty_key)
        return nullptr;
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t empty_key = ~uint64_t{0};
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static uint64_t hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xFF51AFD7ED558CCDull;
    key ^= key >> 33;
    return key;
  }
  struct slot {
    uint64_t key = empty_key;
    merge value{};
  };
  void rehash(size_t capacity);
  std::vector<slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
};

}  // namespace actorllm::text
