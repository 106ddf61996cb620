// Growth and insertion for the flat lookup tables (lookups are inline in the header).
#include "text/lookup_tables.hpp"

#include "util/check.hpp"

#include <bit>
#include <limits>

namespace actorllm::text {
namespace {
// Keep the load factor at or below 1/2 so that probe sequences stay short.
size_t capacity_for(size_t n) { return std::bit_ceil(std::max<size_t>(16, n * 2)); }
}  // namespace

void token_id_table::reserve(size_t n) {
  if (capacity_for(n) > slots_.size())
    rehash(capacity_for(n));
}

void token_id_table::rehash(size_t capacity) {
  std::vector<slot> old = std::move(slots_);
  slots_.assign(capacity, slot{});
  mask_ = capacity - 1;
  for (const slot& s : old) {
    if (s.id < 0)
      continue;
    const uint64_t h = hash_bytes(std::string_view{arena_.data() + s.offset, s.length});
    size_t i = h & mask_;
    while (slots_[i].id >= 0)
      i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void token_id_table::insert_or_assign(std::string_view key, int32_t id) {
  ACTORLLM_CHECK(id >= 0, "token ids are non-negative");
  if ((count_ + 1) * 2 > slots_.size())
    rehash(capacity_for(count_ + 1));
  const uint64_t h = hash_bytes(key);
  const auto tag = static_cast<uint32_t>(h >> 32);
  size_t i = h & mask_;
  for (;; i = (i + 1) & mask_) {
    slot& s = slots_[i];
    if (s.id < 0)
      break;
    if (s.tag == tag && s.length == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
      s.id = id;
      return;
    }
  }
  ACTORLLM_CHECK(arena_.size() + key.size() < std::numeric_limits<uint32_t>::max(), "vocabulary too large");
  slot& s = slots_[i];
  s.offset = static_cast<uint32_t>(arena_.size());
  s.length = static_cast<uint32_t>(key.size());
  s.tag = tag;
  s.id = id;
  arena_.append(key);
  ++count_;
}

void merge_table::reserve(size_t n) {
  if (capacity_for(n) > slots_.size())
    rehash(capacity_for(n));
}

void merge_table::rehash(size_t capacity) {
  std::vector<slot> old = std::move(slots_);
  slots_.assign(capacity, slot{});
  mask_ = capacity - 1;
  for (const slot& s : old) {
    if (s.key == empty_key)
      continue;
    size_t i = hash(s.key) & mask_;
    while (slots_[i].key != empty_key)
      i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void merge_table::insert_or_assign(int32_t left, int32_t right, merge m) {
  if ((count_ + 1) * 2 > slots_.size())
    rehash(capacity_for(count_ + 1));
  const uint64_t key = pack(left, right);
  size_t i = hash(key) & mask_;
  for (;; i = (i + 1) & mask_) {
    slot& s = slots_[i];
    if (s.key == key) {
      s.value = m;
      return;
    }
    if (s.key == empty_key)
      break;
  }
  slots_[i].key = key;
  slots_[i].value = m;
  ++count_;
}

}  // namespace actorllm::text
