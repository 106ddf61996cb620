// Packed weights kept on disk between runs, so that a CPU model starts by mapping its weights instead of packing them.
//
// Packing a bf16 model into tensor_layout::cpu_bf16_panels costs more than it reads: every packed page is fresh
// memory the kernel zeroes first (1.1B parameters: 1.6-5 s to the first token on a 2-core VM, most of it zeroing).
// The packed bytes depend only on the weight's bytes and the panel format, so they are written once to a file named
// by a digest of those, and later runs map that file read-only: page cache the kernel already holds, shared by every
// process that serves the model. An entry is checked against a digest of its own bytes each time it is mapped, so a
// file cut short or damaged is packed again, never used.
#pragma once

#include "kernels/tensor.hpp"
#include "util/fast_digest.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace actorllm {
class thread_pool;
}

namespace actorllm::cpu {

/// Where the cache lives and how large it may grow.
struct packed_weight_cache_config {
  std::filesystem::path dir;  ///< empty: no cache
  uint64_t max_bytes = 0;     ///< entries beyond it are evicted, least recently used first

  /// ACTORLLM_PACKED_WEIGHT_CACHE (a directory, "on" for the default one, or "off"; default
  /// $XDG_CACHE_HOME/actorllm/packed-weights, else $HOME/.cache/actorllm/packed-weights) and
  /// ACTORLLM_PACKED_WEIGHT_CACHE_GB (the limit in GiB, default 64; 0 is off). Throws std::invalid_argument naming the
  /// variable when a value is not one of those.
  static packed_weight_cache_config from_environment();
};

/// The cache: entries are files `<key>.panels` in one directory, each the packed bytes followed by a trailer (format,
/// size, key and a digest of the bytes). Thread-safe, and safe between processes: an entry appears only complete (a
/// temporary file renamed into place).
class packed_weight_cache {
 public:
  explicit packed_weight_cache(packed_weight_cache_config config);

  /// The process's cache as the environment configures it, or null when it is off; made on first use (throws as
  /// packed_weight_cache_config::from_environment does).
  static std::shared_ptr<packed_weight_cache> from_environment();

  /// `find`'s size for bytes whose size the key does not fix (compact panels: it follows from the weights' values).
  static constexpr size_t any_size = static_cast<size_t>(-1);
  /// The bytes stored under `key`, mapped read-only (the mapping is the buffer), when an entry exists with exactly
  /// `bytes` bytes (any_size: as many as it holds) whose digest checks out; else null. A damaged entry is removed (with
  /// a warning). Its 2 MiB blocks that the page cache holds in small pages are read again into huge ones first
  /// (util/huge_file_pages.hpp).
  std::shared_ptr<buffer> find(const util::digest128& key, size_t bytes, thread_pool& pool);

  /// An entry being written: memory to pack `bytes` bytes into, backed by a temporary file in the cache (page cache,
  /// so the process serves from the same pages a later run maps). Removed unless committed.
  class pending_entry {
   public:
    pending_entry(const pending_entry&) = delete;
    pending_entry& operator=(const pending_entry&) = delete;
    ~pending_entry();
    /// Where the bytes go (2 MiB-aligned).
    std::byte* data() { return static_cast<std::byte*>(at_); }
    size_t size() const { return bytes_; }
    /// Seals the bytes written (their digest in the trailer), maps them read-only and renames the file into place;
    /// the mapping, which stays valid even where the rename failed (a warning, and the cache stores nothing more).
    std::shared_ptr<buffer> commit(thread_pool& pool);

   private:
    friend class packed_weight_cache;
    pending_entry(packed_weight_cache& cache, util::digest128 key, size_t bytes, int fd, std::filesystem::path tmp,
                  void* at, size_t mapped, std::vector<file_origin> sources);
    packed_weight_cache& cache_;
    std::vector<file_origin> sources_;
    util::digest128 key_;
    size_t bytes_;
    int fd_;
    std::filesystem::path tmp_;
    void* at_;
    size_t mapped_;
  };

  /// A new entry of `bytes` bytes under `key`, once the least recently used entries past the limit are evicted; null
  /// where the cache does not take it (larger than the limit, short of disk space, or the file cannot be made: a
  /// warning the first time, and this cache stores nothing more), when the caller packs into memory of its own.
  /// `sources`: the checkpoint files (buffer::origin) the bytes were packed from, where known; recorded beside the
  /// entry (`<key>.source`), so that the entry is removed as stale at a later store once one of them is gone or
  /// changed, before any entry is evicted for space.
  std::unique_ptr<pending_entry> begin_store(const util::digest128& key, size_t bytes,
                                             std::vector<file_origin> sources = {});

  /// What the cache did in this process.
  struct counts {
    int64_t hits = 0, misses = 0, stored = 0;  ///< stored: entries committed
    int64_t reread_blocks = 0;  ///< 2 MiB blocks of found entries read again into huge pages (util/huge_file_pages)
  };
  counts totals() const;

  const std::filesystem::path& dir() const { return config_.dir; }

 private:
  std::filesystem::path entry_path(const util::digest128& key) const;
  // A fresh name for a file being written under `key` (entry or source record), renamed into place when whole.
  std::filesystem::path temporary_path(const util::digest128& key) const;
  // Removes the entries whose source files are gone or changed, then others, least recently used first, until
  // `incoming` more bytes fit within the limit.
  void evict_for(uint64_t incoming);
  // Writes `key`'s source record (a failure only leaves the entry without one).
  void record_sources(const util::digest128& key, const std::vector<file_origin>& sources) const;
  void disable(const std::string& why);

  packed_weight_cache_config config_;
  std::mutex store_mutex_;  // one eviction and space check at a time in this process
  std::atomic<bool> disabled_{false};
  std::atomic<int64_t> hits_{0}, misses_{0}, stored_{0}, reread_blocks_{0};
  std::atomic<bool> told_hit_{false}, told_store_{false}, told_reread_{false}, told_small_{false};
  std::atomic<bool> reread_futile_{false};  // an entry stayed all in small pages after reading it again
};

}  // namespace actorllm::cpu
