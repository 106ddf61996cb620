// Read-ahead across kernel calls (see read_ahead.hpp).
#include "kernels/cpu/read_ahead.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace actorllm::cpu {

namespace {
thread_local volatile uint64_t read_ahead_sink = 0;
constexpr size_t max_owners = 8;  // a call's targets (a plan with more reads nothing)
}  // namespace

void read_ahead(const read_ahead_plan& plan, int thread_index, const std::function<bool()>& stop) noexcept {
  if (thread_index < 0 || static_cast<size_t>(thread_index) >= plan.threads.size() || plan.owners.empty())
    return;
  const read_ahead_plan::thread_heads& h = plan.threads[static_cast<size_t>(thread_index)];
  if (h.tile_bytes == 0)
    return;
  // The weights stay alive while this runs (a plan outlives the calls it was made for).
  std::array<std::shared_ptr<const void>, max_owners> alive;
  if (plan.owners.size() > alive.size())
    return;
  for (size_t i = 0; i < plan.owners.size(); ++i)
    if ((alive[i] = plan.owners[i].lock()) == nullptr)
      return;
  constexpr size_t line = 64, check_every = 1024;
#if defined(__AVX512F__)
  __m512i seen = _mm512_setzero_si512();
#else
  uint64_t seen = 0;
#endif
  for (size_t off = 0; off < h.bytes; off += check_every) {
    if (stop())
      break;
    for (size_t l = off; l < off + check_every && l < h.bytes; l += line) {
      const size_t tile = l / h.tile_bytes, in_tile = l % h.tile_bytes;
      for (size_t s = 0; s < static_cast<size_t>(h.count); ++s) {
        if (tile >= static_cast<size_t>(h.tiles[s]))
          continue;
        const char* p = h.at[s][tile] + in_tile;
#if defined(__AVX512F__)
        seen = _mm512_or_si512(seen, _mm512_loadu_si512(p));
#else
        uint64_t v;
        std::memcpy(&v, p, sizeof v);
        seen |= v;
#endif
      }
    }
  }
  // The loads' values are used, so the compiler keeps them.
#if defined(__AVX512F__)
  uint64_t lanes[8];
  _mm512_storeu_si512(lanes, seen);
  uint64_t all = 0;
  for (uint64_t lane : lanes)
    all |= lane;
  read_ahead_sink = all;
#else
  read_ahead_sink = seen;
#endif
}

std::shared_ptr<const read_ahead_plan> next_call_table::advance(const read_ahead_key& key,
                                                                const std::function<read_ahead_plan()>& make_plan) {
  // This thread's previous call, and the table it went to (a call made through another table is not this one's).
  thread_local const next_call_table* previous_table = nullptr;
  thread_local read_ahead_key previous;
  std::lock_guard lock(mutex_);
  if (previous_table == this && previous.weights != nullptr) {
    if (next_.size() >= max_entries && next_.find(previous.weights) == next_.end())
      next_.clear();
    successor& s = next_[previous.weights];
    if (s.plan == nullptr || !(s.key == key)) {
      s.key = key;
      s.plan = std::make_shared<const read_ahead_plan>(make_plan());
    }
  }
  previous_table = this;
  previous = key;
  const auto it = next_.find(key.weights);
  return it == next_.end() ? nullptr : it->second.plan;
}

next_call_table& next_call_table::global() {
  static next_call_table table;
  return table;
}

}  // namespace actorllm::cpu
