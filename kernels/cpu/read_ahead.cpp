// Read-ahead across kernel calls (see read_ahead.hpp).
#include "kernels/cpu/read_ahead.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#include <unistd.h>
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

size_t cache_sizes::parse_size(const std::string& text) {
  size_t i = 0, value = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    value = value * 10 + static_cast<size_t>(text[i++] - '0');
    if (value > size_t{1} << 32)
      return 0;  // past any real cache (and no overflow below)
  }
  if (i == 0)
    return 0;
  size_t unit = 1;
  if (i < text.size() && (text[i] == 'K' || text[i] == 'M' || text[i] == 'G')) {
    unit = text[i] == 'K' ? size_t{1} << 10 : text[i] == 'M' ? size_t{1} << 20 : size_t{1} << 30;
    ++i;
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])))
    ++i;
  return i == text.size() ? value * unit : 0;
}

int cache_sizes::count_cpus(const std::string& list) {
  int count = 0;
  std::string item;
  std::istringstream in(list);
  while (std::getline(in, item, ',')) {
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back())))
      item.pop_back();
    const size_t dash = item.find('-');
    char* end = nullptr;
    const long first = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end == item.c_str() || first < 0)
      return 0;
    long last = first;
    if (dash != std::string::npos) {
      if (end != item.c_str() + dash)
        return 0;
      const char* rest = item.c_str() + dash + 1;
      last = std::strtol(rest, &end, 10);
      if (end == rest || last < first)
        return 0;
    }
    if (*end != '\0' || last - first >= 1 << 20)
      return 0;
    count += static_cast<int>(last - first + 1);
  }
  return count;
}

cache_sizes::leaf_cache cache_sizes::decode_cache_leaf(uint32_t eax, uint32_t ebx, uint32_t ecx) {
  const uint32_t type = eax & 0x1f;  // 0: no more caches, 1: data, 2: instruction, 3: unified
  if (type != 1 && type != 3)
    return {};
  leaf_cache c;
  c.level = static_cast<int>((eax >> 5) & 0x7);
  c.shared_by = static_cast<int>((eax >> 14) & 0xfff) + 1;
  const size_t ways = ((ebx >> 22) & 0x3ff) + 1, partitions = ((ebx >> 12) & 0x3ff) + 1, line = (ebx & 0xfff) + 1;
  c.bytes = ways * partitions * line * (size_t{ecx} + 1);
  return c;
}

cache_sizes cache_sizes::decode_extended_leaf(uint32_t ecx, uint32_t edx, int online_cpus) {
  cache_sizes c;
  c.l2_bytes = size_t{ecx >> 16} << 10;
  if ((edx >> 18) > 0 && online_cpus > 0) {  // an L3 counts only with its sharers
    c.l3_bytes = size_t{edx >> 18} << 19;
    c.l3_shared_by = online_cpus;
  }
  return c;
}

void cache_sizes::fill_from(const cache_sizes& other) {
  if (l2_bytes == 0)
    l2_bytes = other.l2_bytes;
  if ((l3_bytes == 0 || l3_shared_by <= 0) && other.l3_bytes > 0 && other.l3_shared_by > 0) {
    l3_bytes = other.l3_bytes;
    l3_shared_by = other.l3_shared_by;
  }
}

namespace {

// What CPUID says of this CPU's caches, where sysfs did not (cache_sizes::of_this_machine).
cache_sizes caches_from_cpuid() {
  cache_sizes c;
#if defined(__x86_64__) || defined(__i386__)
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  const uint32_t max_leaf = __get_cpuid_max(0, nullptr), max_extended = __get_cpuid_max(0x80000000, nullptr);
  for (const uint32_t leaf : {uint32_t{4}, uint32_t{0x8000001d}}) {
    if ((leaf < 0x80000000 ? max_leaf : max_extended) < leaf)
      continue;
    cache_sizes found;
    for (uint32_t sub = 0; sub < 8; ++sub) {
      __cpuid_count(leaf, sub, eax, ebx, ecx, edx);
      if ((eax & 0x1f) == 0)
        break;
      const cache_sizes::leaf_cache one = cache_sizes::decode_cache_leaf(eax, ebx, ecx);
      if (one.level == 2)
        found.l2_bytes = one.bytes;
      if (one.level == 3) {
        found.l3_bytes = one.bytes;
        found.l3_shared_by = one.shared_by;
      }
    }
    c.fill_from(found);
  }
  if (max_extended >= 0x80000006) {
    __cpuid(0x80000006, eax, ebx, ecx, edx);
    c.fill_from(cache_sizes::decode_extended_leaf(ecx, edx, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN))));
  }
#endif
  return c;
}

}  // namespace

const cache_sizes& cache_sizes::of_this_machine() {
  static const cache_sizes sizes = [] {
    cache_sizes c;
    auto read = [](const std::string& path) {
      std::ifstream f(path);
      std::string text;
      std::getline(f, text);
      return text;
    };
    for (int i = 0; i < 8; ++i) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
      const std::string level = read(dir + "level"), type = read(dir + "type");
      if (level.empty())
        continue;
      if (level == "2" && type != "Instruction")
        c.l2_bytes = parse_size(read(dir + "size"));
      if (level == "3" && type != "Instruction") {
        c.l3_bytes = parse_size(read(dir + "size"));
        c.l3_shared_by = count_cpus(read(dir + "shared_cpu_list"));
      }
    }
    if (c.l2_bytes == 0 || c.l3_bytes == 0 || c.l3_shared_by <= 0)
      c.fill_from(caches_from_cpuid());
    return c;
  }();
  return sizes;
}

size_t read_ahead_budget(const cache_sizes& caches, int n_threads, size_t max_bytes) {
  constexpr size_t unknown = 512 * 1024;
  if (caches.l2_bytes == 0 || caches.l3_bytes == 0 || caches.l3_shared_by <= 0)
    return std::min(unknown, max_bytes);
  const auto sharers = static_cast<size_t>(std::max(1, std::min(n_threads, caches.l3_shared_by)));
  return std::min(max_bytes, caches.l2_bytes + caches.l3_bytes / sharers / 2);
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
