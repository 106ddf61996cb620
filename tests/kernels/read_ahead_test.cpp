// Read-ahead across kernel calls: the table of which call followed which, and the prefetch loop's bounds and stop.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "kernels/cpu/read_ahead.hpp"

using actorllm::cpu::next_call_table;
using actorllm::cpu::read_ahead_key;
using actorllm::cpu::read_ahead_plan;

namespace {

// A plan whose single thread's first stream starts at `tag` (only compared, never read).
read_ahead_plan plan_tagged(const char* tag) {
  read_ahead_plan p;
  p.threads.push_back({});
  p.threads[0].at[0][0] = tag;
  p.threads[0].tiles[0] = 1;
  p.threads[0].count = 1;
  return p;
}

const char* tag_of(const std::shared_ptr<const read_ahead_plan>& p) {
  return p == nullptr ? nullptr : p->threads.at(0).at[0][0];
}

}  // namespace

TEST_CASE("next_call_table: after one pass over a sequence of calls, each call gets the plan of the call after it") {
  next_call_table table;
  const char a = 'a', b = 'b', c = 'c';
  int plans_made = 0;
  auto key = [](const char& w) { return read_ahead_key{&w, 8, 1024, 4, 2}; };
  auto call = [&](const char& w) {
    return tag_of(table.advance(key(w), [&] {
      ++plans_made;
      return plan_tagged(&w);
    }));
  };
  // First step: nothing is known yet.
  CHECK(call(a) == nullptr);
  CHECK(call(b) == nullptr);
  CHECK(call(c) == nullptr);
  // Second step: each call learns its successor from the first (c -> a was recorded when a came after c).
  CHECK(call(a) == &b);
  CHECK(call(b) == &c);
  CHECK(call(c) == &a);
  CHECK(plans_made == 3);  // a's successor b, b's c, c's a: made once, then reused
  CHECK(call(a) == &b);
  CHECK(plans_made == 3);

  // A different sequence replaces the guess, and a changed shape of the same weight makes a new plan.
  CHECK(call(c) == &a);  // recorded a -> c, in place of a -> b
  CHECK(call(a) == &c);  // and a's guess is c now
  CHECK(plans_made == 4);
  const auto changed = table.advance(read_ahead_key{&b, 8, 1024, 2, 2}, [&] {  // b with 2 streams after a
    ++plans_made;
    return plan_tagged(&b);
  });
  CHECK(plans_made == 5);
  CHECK(tag_of(changed) == &c);
}

TEST_CASE("next_call_table: calls through another table are not this table's history") {
  next_call_table one, two;
  const char a = 'a', b = 'b';
  auto make = [](const char* t) { return [t] { return plan_tagged(t); }; };
  one.advance({&a, 1, 64, 1, 1}, make(&a));
  two.advance({&b, 1, 64, 1, 1}, make(&b));  // this thread's previous call was in table one
  CHECK(one.advance({&a, 1, 64, 1, 1}, make(&a)) == nullptr);
  CHECK(two.advance({&a, 1, 64, 1, 1}, make(&a)) == nullptr);  // b -> a learned in two only now
  CHECK(tag_of(two.advance({&b, 1, 64, 1, 1}, make(&b))) == nullptr);
  CHECK(tag_of(two.advance({&a, 1, 64, 1, 1}, make(&a))) == &b);  // a -> b, learned just before
}

TEST_CASE("read_ahead: stops when told, checks often, ignores threads the plan does not have [asan]") {
  auto owned = std::make_shared<std::vector<char>>(64 * 1024);
  std::vector<char>& memory = *owned;
  read_ahead_plan plan;
  plan.owners.push_back(owned);
  read_ahead_plan::thread_heads h;
  h.count = 2;  // a stream of two 8 KiB tiles, and one of one
  h.tile_bytes = 8 * 1024;
  h.at[0] = {memory.data(), memory.data() + 40 * 1024};
  h.tiles[0] = 2;
  h.at[1] = {memory.data() + 16 * 1024};
  h.tiles[1] = 1;
  h.bytes = 2 * h.tile_bytes;
  plan.threads.push_back(h);

  int checks = 0;
  actorllm::cpu::read_ahead(plan, 0, [&] {
    ++checks;
    return false;
  });
  CHECK(checks == static_cast<int>(h.bytes / 1024));  // once per KiB of a stream, to the end of the longest

  checks = 0;
  actorllm::cpu::read_ahead(plan, 0, [&] { return ++checks == 3; });
  CHECK(checks == 3);  // returned at the first true

  checks = 0;
  actorllm::cpu::read_ahead(plan, 1, [&] {
    ++checks;
    return false;
  });
  actorllm::cpu::read_ahead(plan, -1, [&] {
    ++checks;
    return false;
  });
  CHECK(checks == 0);
}

TEST_CASE("read_ahead: reads nothing once an owner of the weights is gone, nor for a plan without owners [asan]") {
  auto first = std::make_shared<std::vector<char>>(16 * 1024);
  auto second = std::make_shared<std::vector<char>>(16 * 1024);
  read_ahead_plan plan;
  read_ahead_plan::thread_heads h;
  h.count = 2;
  h.tile_bytes = 8 * 1024;
  h.at[0] = {first->data(), first->data() + 8 * 1024};
  h.tiles[0] = 2;
  h.at[1] = {second->data(), second->data() + 8 * 1024};
  h.tiles[1] = 2;
  h.bytes = 2 * h.tile_bytes;
  plan.threads.push_back(h);
  int checks = 0;
  auto count = [&] {
    ++checks;
    return false;
  };

  actorllm::cpu::read_ahead(plan, 0, count);
  CHECK(checks == 0);  // no owners: nothing guards the memory

  plan.owners = {first, second};
  actorllm::cpu::read_ahead(plan, 0, count);
  CHECK(checks == static_cast<int>(h.bytes / 1024));  // both alive: every KiB of the streams

  checks = 0;
  second.reset();  // freed: under ASan a read of it would be reported
  actorllm::cpu::read_ahead(plan, 0, count);
  CHECK(checks == 0);
}

TEST_CASE("cache_sizes: sysfs sizes and CPU lists parse, and anything else reads as unknown (0)") {
  using actorllm::cpu::cache_sizes;
  CHECK(cache_sizes::parse_size("1024K") == 1024u * 1024u);
  CHECK(cache_sizes::parse_size("32768K\n") == 32u << 20);
  CHECK(cache_sizes::parse_size("32M") == 32u << 20);
  CHECK(cache_sizes::parse_size("512") == 512u);
  CHECK(cache_sizes::parse_size("") == 0u);
  CHECK(cache_sizes::parse_size("K") == 0u);
  CHECK(cache_sizes::parse_size("12Q") == 0u);
  CHECK(cache_sizes::parse_size("99999999999999999999999K") == 0u);
  CHECK(cache_sizes::count_cpus("0") == 1);
  CHECK(cache_sizes::count_cpus("0-1") == 2);
  CHECK(cache_sizes::count_cpus("0-7,64-71\n") == 16);
  CHECK(cache_sizes::count_cpus("3,5,9-10") == 4);
  CHECK(cache_sizes::count_cpus("") == 0);
  CHECK(cache_sizes::count_cpus("7-3") == 0);
  CHECK(cache_sizes::count_cpus("a-b") == 0);
  CHECK(cache_sizes::count_cpus("0x-3") == 0);
  // This machine's, where sysfs says: an L3 is shared by at least one CPU.
  const cache_sizes& here = cache_sizes::of_this_machine();
  if (here.l3_bytes > 0) {
    CHECK(here.l3_shared_by >= 1);
  }
}

TEST_CASE(
    "read_ahead_budget: a thread's L2 and half its share of the L3, capped, and 512 KiB where the caches are "
    "unknown") {
  using actorllm::cpu::cache_sizes;
  using actorllm::cpu::read_ahead_budget;
  constexpr size_t mib = size_t{1} << 20;
  // The 2-vCPU Zen 4 VM it was measured on: 1 MiB L2, 32 MiB L3 on both CPUs; 1 + 32 / 2 / 2 = 9 MiB, capped at 4.
  CHECK(read_ahead_budget({.l2_bytes = mib, .l3_bytes = 32 * mib, .l3_shared_by = 2}, 2) == 4 * mib);
  // A 64-core EPYC, eight cores to a 32 MiB L3, 64 pool threads: the L3 split among its eight CPUs, 1 + 32 / 8 / 2.
  CHECK(read_ahead_budget({.l2_bytes = mib, .l3_bytes = 32 * mib, .l3_shared_by = 8}, 64) == 3 * mib);
  // Eight client cores (16 CPUs) on 32 MiB with 16 threads: 1 + 32 / 16 / 2 = 2 MiB; with 4 threads, 1 + 4 = 5 -> 4.
  CHECK(read_ahead_budget({.l2_bytes = mib, .l3_bytes = 32 * mib, .l3_shared_by = 16}, 16) == 2 * mib);
  CHECK(read_ahead_budget({.l2_bytes = mib, .l3_bytes = 32 * mib, .l3_shared_by = 16}, 4) == 4 * mib);
  // A small L3: 512 KiB L2, 4 MiB L3 on 8 CPUs, 8 threads: 512 KiB + 256 KiB.
  CHECK(read_ahead_budget({.l2_bytes = mib / 2, .l3_bytes = 4 * mib, .l3_shared_by = 8}, 8) == 3 * mib / 4);
  // Unknown caches: the 512 KiB it read before it knew them; a smaller cap wins.
  CHECK(read_ahead_budget({}, 2) == mib / 2);
  CHECK(read_ahead_budget({.l2_bytes = mib, .l3_bytes = 0, .l3_shared_by = 0}, 2) == mib / 2);
  CHECK(read_ahead_budget({.l2_bytes = mib, .l3_bytes = 32 * mib, .l3_shared_by = 2}, 2, mib) == mib);
  // A pool of one thread, or a count past the CPUs: never divided by zero.
  CHECK(read_ahead_budget({.l2_bytes = mib, .l3_bytes = 2 * mib, .l3_shared_by = 2}, 0) == 2 * mib);
}

TEST_CASE("cache_sizes from CPUID: the cache leaves' sizes and sharers, leaf 0x80000006, and sysfs's gaps filled") {
  using actorllm::cpu::cache_sizes;
  constexpr size_t mib = size_t{1} << 20;
  // A Zen 4 CCX's L3 as leaf 0x8000001D describes it: unified (3), level 3, 16 CPUs, 16 ways, 64-byte lines, 32768
  // sets: 32 MiB.
  const uint32_t l3_eax = 3u | (3u << 5) | (15u << 14), l3_ebx = (15u << 22) | 63u, l3_ecx = 32767u;
  const cache_sizes::leaf_cache l3 = cache_sizes::decode_cache_leaf(l3_eax, l3_ebx, l3_ecx);
  CHECK(l3.level == 3);
  CHECK(l3.bytes == 32 * mib);
  CHECK(l3.shared_by == 16);
  // Its L2: unified, level 2, 2 CPUs (SMT), 8 ways, 2048 sets: 1 MiB.
  const cache_sizes::leaf_cache l2 =
      cache_sizes::decode_cache_leaf(3u | (2u << 5) | (1u << 14), (7u << 22) | 63u, 2047u);
  CHECK(l2.level == 2);
  CHECK(l2.bytes == mib);
  CHECK(l2.shared_by == 2);
  // An instruction cache, and the end of the list (type 0), are no data cache.
  CHECK(cache_sizes::decode_cache_leaf(2u | (1u << 5), (7u << 22) | 63u, 63u).level == 0);
  CHECK(cache_sizes::decode_cache_leaf(0u, 0u, 0u).level == 0);

  // Leaf 0x80000006 as the 2-vCPU Zen 5 VM (no sysfs caches) gave it: a 1 MiB L2, an L3 of 1016 x 512 KiB, taken
  // as shared by the 2 online CPUs; its read-ahead budget is the 4 MiB cap.
  const cache_sizes vm = cache_sizes::decode_extended_leaf((1024u << 16) | (8u << 12) | 64u, 1016u << 18, 2);
  CHECK(vm.l2_bytes == mib);
  CHECK(vm.l3_bytes == 1016 * mib / 2);
  CHECK(vm.l3_shared_by == 2);
  CHECK(actorllm::cpu::read_ahead_budget(vm, 2) == 4 * mib);
  // Intel's leaf gives no L3 (EDX reserved): unknown, as is an L3 whose sharers are unknown.
  const cache_sizes intel = cache_sizes::decode_extended_leaf((2048u << 16) | 64u, 0u, 16);
  CHECK(intel.l2_bytes == 2 * mib);
  CHECK(intel.l3_bytes == 0);
  CHECK(intel.l3_shared_by == 0);
  CHECK(cache_sizes::decode_extended_leaf(1024u << 16, 64u << 18, 0).l3_bytes == 0);

  // Filling: only unknown fields, and the L3's size and sharers together.
  cache_sizes from_sysfs{.l2_bytes = mib, .l3_bytes = 0, .l3_shared_by = 0};
  from_sysfs.fill_from({.l2_bytes = 2 * mib, .l3_bytes = 32 * mib, .l3_shared_by = 8});
  CHECK(from_sysfs.l2_bytes == mib);
  CHECK(from_sysfs.l3_bytes == 32 * mib);
  CHECK(from_sysfs.l3_shared_by == 8);
  cache_sizes known{.l2_bytes = mib, .l3_bytes = 16 * mib, .l3_shared_by = 4};
  known.fill_from({.l2_bytes = 2 * mib, .l3_bytes = 32 * mib, .l3_shared_by = 8});
  CHECK(known.l3_bytes == 16 * mib);
  CHECK(known.l3_shared_by == 4);
  cache_sizes half{};
  half.fill_from({.l2_bytes = 0, .l3_bytes = 32 * mib, .l3_shared_by = 0});  // a size without sharers is no L3
  CHECK(half.l3_bytes == 0);

  // This machine: sysfs or CPUID name an L2 on any x86 CPU this project builds for.
#if defined(__x86_64__)
  const cache_sizes& here = cache_sizes::of_this_machine();
  MESSAGE("this machine: L2 " << here.l2_bytes << " B, L3 " << here.l3_bytes << " B shared by " << here.l3_shared_by
                              << " CPUs; read-ahead budget at 2 threads " << actorllm::cpu::read_ahead_budget(here, 2)
                              << " B");
  CHECK(here.l2_bytes > 0);
#endif
}
