// Read-ahead across the kernel calls of a decode step. Batch-1 decode streams the weights once per step, and each
// core reads only about half of what the machine can, so every moment a pool thread waits (for the others' last grain
// of a call, for the next call while the caller runs attention or a norm) is memory bandwidth lost. A step makes the
// same calls in the same order every step, so the call that followed this one last time is the likely next one, and
// a waiting thread can read the start of its first grain of that call into its caches.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace actorllm::cpu {

/// Where each pool thread's first grain of a call starts reading: up to four interleaved streams, each the first tiles
/// (runs of tile_bytes) it reads in order, and how many bytes of each stream to read ahead; and what keeps that memory
/// alive.
struct read_ahead_plan {
  static constexpr int max_streams = 4;
  static constexpr int max_tiles = 32;  // per stream
  struct thread_heads {
    std::array<std::array<const char*, max_tiles>, max_streams> at{};  // stream s: at[s][0 .. tiles[s])
    std::array<int, max_streams> tiles{};
    int count = 0;  // streams
    size_t tile_bytes = 0;
    size_t bytes = 0;  // per stream, at most its tiles' bytes
  };
  std::vector<thread_heads> threads;  // index: the pool thread (0: the caller)
  /// The owners of the weights the heads point into (matmul_target::owner). The read-ahead loads those bytes, and a
  /// load of freed memory can fault, so it reads only while every owner is alive, and nothing for a plan without any.
  std::vector<std::weak_ptr<const void>> owners;
};

/// Reads thread `thread_index`'s heads of `plan` (one load a cache line, the streams interleaved line by line in the
/// order the kernel reads them) while the plan's owners are alive, and returns early once `stop()` holds (checked
/// every 1 KiB per stream). Loads, not prefetch hints: on the 2-vCPU Zen 4 VM in its fast bandwidth state, batch-1
/// decode read 1-4 points more of the probe beside it with loads than with T1 prefetches of the same lines (2026-11-30,
/// alternated 4-step segments, 39 of 56 pairs ahead), the same in its slow state: many of the hints were apparently
/// not carried out.
void read_ahead(const read_ahead_plan& plan, int thread_index, const std::function<bool()>& stop) noexcept;

/// The caches a read-ahead may fill: this CPU's L2, and its L3 with the number of CPUs that share one (0 where the
/// system does not say).
struct cache_sizes {
  size_t l2_bytes = 0;
  size_t l3_bytes = 0;
  int l3_shared_by = 0;

  /// CPU 0's, from /sys/devices/system/cpu/cpu0/cache, and where that does not say (a 2-vCPU Zen 5 VM had no cache
  /// directory there) from CPUID: first its cache leaves (4, 0x8000001D), which give each cache's sharers, then leaf
  /// 0x80000006, its L3 taken as shared by every online CPU. Read once; zeros where nothing says.
  static const cache_sizes& of_this_machine();
  /// Parses a sysfs cache `size` ("1024K", "32M", "512") into bytes: 0 when it is not one.
  static size_t parse_size(const std::string& text);
  /// Counts the CPUs of a sysfs CPU list ("0-7,64-71"): 0 when it is not one.
  static int count_cpus(const std::string& list);

  /// One cache as a CPUID cache leaf's subleaf describes it (leaf 4, or AMD's 0x8000001D: EAX type and level and the
  /// logical CPUs sharing it, EBX ways, partitions and line size, ECX sets); level 0 for an instruction cache or no
  /// cache (the end of the list).
  struct leaf_cache {
    int level = 0;
    size_t bytes = 0;
    int shared_by = 0;
  };
  static leaf_cache decode_cache_leaf(uint32_t eax, uint32_t ebx, uint32_t ecx);
  /// What CPUID leaf 0x80000006 says (ECX bits 31-16: L2 KiB; EDX bits 31-18: L3 in 512 KiB units; 0 unknown), its L3
  /// taken as shared by `online_cpus`, since the leaf does not say by how many.
  static cache_sizes decode_extended_leaf(uint32_t ecx, uint32_t edx, int online_cpus);
  /// This one's unknown fields (zeros) taken from `other`; the L3's size and sharers only together.
  void fill_from(const cache_sizes& other);
};

/// How much each of `n_threads` pool threads may read ahead: its L2 and half its share of the L3 (a Zen L3 takes what
/// L2 evicts), at most 4 MiB (`max_bytes`; on a 2-vCPU Zen 4 VM with 32 MiB of L3, 4 MiB read 1-2% more than 2 or 8),
/// and 512 KiB where the caches are unknown (on a 2-vCPU Zen 5 VM whose sysfs gave no caches, 4 MiB from CPUID against
/// 512 KiB: batch-1 decode 1% faster, 139 of 240 alternated segments ahead). The L3's share is divided among the
/// threads that share it: the pool's, as many as the CPUs on one L3 at most.
size_t read_ahead_budget(const cache_sizes& caches, int n_threads, size_t max_bytes = size_t{4} << 20);

/// What identifies a call for read-ahead: its first weight and the shape of its split over the pool.
struct read_ahead_key {
  const void* weights = nullptr;
  int64_t n_units = 0;
  int64_t unit_bytes = 0;
  int streams = 0;
  int n_threads = 0;
  bool operator==(const read_ahead_key&) const = default;
};

/// Which call followed which, per calling thread: a table from a call's first weight to the call that came next the
/// last time, and that call's plan. Thread-safe; a wrong guess only reads lines the next call does not, and a guess
/// into weights freed since reads nothing (read_ahead_plan::owners).
class next_call_table {
 public:
  /// The calling thread is making call `key`: records it (with make_plan(), made only when the entry changes) as what
  /// followed this thread's previous call, and returns the plan of the call that followed `key` last time, or null.
  std::shared_ptr<const read_ahead_plan> advance(const read_ahead_key& key,
                                                 const std::function<read_ahead_plan()>& make_plan);

  /// The process-wide table.
  static next_call_table& global();

 private:
  struct successor {
    read_ahead_key key;
    std::shared_ptr<const read_ahead_plan> plan;
  };
  // Weights freed and loaded again leave stale entries (harmless); past this many the table starts over.
  static constexpr size_t max_entries = 4096;

  std::mutex mutex_;
  std::unordered_map<const void*, successor> next_;
};

}  // namespace actorllm::cpu
