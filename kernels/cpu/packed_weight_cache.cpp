// Packed weights kept on disk between runs (see packed_weight_cache.hpp).
#include "kernels/cpu/packed_weight_cache.hpp"

#include "util/file_descriptor.hpp"
#include "util/huge_file_pages.hpp"
#include "util/log.hpp"
#include "util/populate_pages.hpp"
#include "util/thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace actorllm::cpu {

namespace {

constexpr std::string_view where = "packed_weight_cache";
constexpr std::string_view entry_extension = ".panels", source_extension = ".source";
constexpr size_t huge_page = util::huge_page_bytes, small_page = 4096;
// Left free on the cache's file system beyond an entry, so that the cache never fills a disk.
constexpr uint64_t free_space_margin = uint64_t{1} << 30;

// Follows an entry's bytes. Native byte order: an entry is for the machine that packed it (the panels are too).
struct trailer {
  std::array<char, 8> magic{};
  uint32_t version = 0;
  uint32_t reserved = 0;
  uint64_t bytes = 0;
  util::digest128 key;
  util::digest128 data;
  uint64_t reserved2 = 0;
};
static_assert(sizeof(trailer) == 64);
constexpr std::array<char, 8> trailer_magic = {'A', 'L', 'P', 'A', 'N', 'E', 'L', 'S'};
constexpr uint32_t trailer_version = 1;

// An entry's bytes mapped read-only at a 2 MiB-aligned address (so the kernel can map the page cache's huge folios
// whole); unmapped with the last tensor that refers to it.
class mapped_entry final : public buffer {
 public:
  mapped_entry(void* at, size_t mapped, size_t bytes) : at_(at), mapped_(mapped), bytes_(bytes) {}
  ~mapped_entry() override { ::munmap(at_, mapped_); }
  mapped_entry(const mapped_entry&) = delete;
  mapped_entry& operator=(const mapped_entry&) = delete;
  void* data() override { return at_; }
  size_t size() const override { return bytes_; }
  device where() const override { return device{}; }

 private:
  void* at_;
  size_t mapped_;
  size_t bytes_;
};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Maps `bytes` of `fd` from offset 0 at a 2 MiB boundary: read-only and private, or `writable` and shared (packing
// into the file's page cache); null (errno set) when it cannot.
void* map_aligned(int fd, size_t bytes, size_t& mapped, bool writable) {
  mapped = round_up(bytes, small_page);
  const size_t reserve = mapped + huge_page;
  void* r = ::mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED)
    return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(r);
  const uintptr_t at = round_up(base, huge_page);
  if (at > base)
    ::munmap(r, at - base);
  if (base + reserve > at + mapped)
    ::munmap(reinterpret_cast<void*>(at + mapped), base + reserve - (at + mapped));
  void* m = ::mmap(reinterpret_cast<void*>(at), mapped, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   (writable ? MAP_SHARED : MAP_PRIVATE) | MAP_FIXED, fd, 0);
  if (m == MAP_FAILED) {
    const int e = errno;
    ::munmap(reinterpret_cast<void*>(at), mapped);
    errno = e;
    return nullptr;
  }
  // Before the first touch: a fault then reads the file ahead (or fills it) in huge folios where the page cache has
  // none yet, which the kernel maps whole (2 MiB TLB entries, as the weights packed into memory of their own get).
  ::madvise(m, mapped, MADV_HUGEPAGE);
  return m;
}

// Locks an entry's pages in memory, as packed memory of the process's own was (no swap: never evicted); where the
// process may not (RLIMIT_MEMLOCK without CAP_IPC_LOCK), says once that the kernel may drop them under memory pressure.
void lock_in_memory(void* at, size_t bytes) {
  static std::atomic<bool> told{false};
  if (::mlock(at, bytes) != 0 && !told.exchange(true))
    log::info(where,
              "packed weights mapped from the cache are not locked in memory ({}): under memory pressure the kernel "
              "may drop them and read them back from disk",
              std::strerror(errno));
}

util::digest128 digest_of(std::span<const std::byte> bytes, thread_pool& pool) {
  util::fast_digest d;
  d.add(bytes, pool);
  return d.value();
}

std::filesystem::path default_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return std::filesystem::path(xdg) / "actorllm" / "packed-weights";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::filesystem::path(home) / ".cache" / "actorllm" / "packed-weights";
  return {};
}

// Whether the file a source record names still is that file (the same identity as stat(2) gives it).
bool source_unchanged(const file_origin& o) {
  struct stat st {};
  return ::stat(o.path.c_str(), &st) == 0 && file_origin_of(st, o.path) == o;
}

// A source record: one line per file (parts from one file once), "device inode size modified_ns changed_ns path".
std::string source_record(const std::vector<file_origin>& sources) {
  std::string out;
  for (const file_origin& o : sources) {
    const std::string line =
        fmt::format("{} {} {} {} {} {}\n", o.device, o.inode, o.size, o.modified_ns, o.changed_ns, o.path);
    if (out.find(line) == std::string::npos)
      out += line;
  }
  return out;
}

// The files a source record names; false when it cannot be read as one (then the entry is kept, as one without).
bool read_source_record(const std::filesystem::path& path, std::vector<file_origin>& out) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    file_origin o;  // offset 0: a record names files, not places in them
    if (!(fields >> o.device >> o.inode >> o.size >> o.modified_ns >> o.changed_ns) || fields.get() != ' ')
      return false;
    std::getline(fields, o.path);
    if (o.path.empty())
      return false;
    out.push_back(std::move(o));
  }
  return !out.empty();
}

}  // namespace

packed_weight_cache_config packed_weight_cache_config::from_environment() {
  packed_weight_cache_config c;
  const char* dir = std::getenv("ACTORLLM_PACKED_WEIGHT_CACHE");
  // "on", as ACTORLLM_COMPACT_PANELS takes it, is the default place (it once made a directory named "on" wherever
  // the process ran).
  if (dir == nullptr || std::string_view(dir) == "on")
    c.dir = default_dir();
  else if (std::string_view(dir) != "off" && *dir != '\0')
    c.dir = dir;
  else if (*dir == '\0')
    throw std::invalid_argument(
        "ACTORLLM_PACKED_WEIGHT_CACHE: empty; give a directory for the packed weights, \"on\" for the default one "
        "or \"off\" for none");
  uint64_t gib = 64;
  if (const char* limit = std::getenv("ACTORLLM_PACKED_WEIGHT_CACHE_GB"); limit != nullptr) {
    const std::string_view v(limit);
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), gib);
    if (ec != std::errc{} || end != v.data() + v.size() || v.empty() || gib > (uint64_t{1} << 20))
      throw std::invalid_argument(fmt::format(
          "ACTORLLM_PACKED_WEIGHT_CACHE_GB: expected a whole number of GiB from 0 (no cache) to 1048576, got '{}'", v));
  }
  c.max_bytes = gib << 30;
  if (c.max_bytes == 0)
    c.dir.clear();
  return c;
}

packed_weight_cache::packed_weight_cache(packed_weight_cache_config config) : config_(std::move(config)) {}

std::shared_ptr<packed_weight_cache> packed_weight_cache::from_environment() {
  static const std::shared_ptr<packed_weight_cache> cache = [] {
    packed_weight_cache_config c = packed_weight_cache_config::from_environment();
    return c.dir.empty() ? nullptr : std::make_shared<packed_weight_cache>(std::move(c));
  }();
  return cache;
}

std::filesystem::path packed_weight_cache::entry_path(const util::digest128& key) const {
  return config_.dir / (key.hex() + std::string(entry_extension));
}

std::filesystem::path packed_weight_cache::temporary_path(const util::digest128& key) const {
  static std::atomic<uint64_t> serial{0};  // unique within the process; the pid makes it so between processes
  return config_.dir / fmt::format("{}.tmp.{}.{}", key.hex(), static_cast<long>(::getpid()), serial.fetch_add(1));
}

std::shared_ptr<buffer> packed_weight_cache::find(const util::digest128& key, size_t bytes, thread_pool& pool) {
  const std::filesystem::path path = entry_path(key);
  util::file_descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || bytes == 0) {
    ++misses_;
    return nullptr;
  }
  if (bytes == any_size)  // as the entry says; its trailer and digest still check every byte of it
    bytes = static_cast<uint64_t>(st.st_size) > sizeof(trailer) ? static_cast<size_t>(st.st_size) - sizeof(trailer)
                                                                : size_t{1};  // too short: damaged below
  auto damaged = [&](std::string_view what) -> std::shared_ptr<buffer> {
    log::warning(where, "{}: {}; removed, the weight is packed again", path.string(), what);
    std::error_code ec;
    std::filesystem::remove(path, ec);
    std::filesystem::remove(std::filesystem::path(path).replace_extension(source_extension), ec);
    ++misses_;
    return nullptr;
  };
  trailer t;
  if (static_cast<uint64_t>(st.st_size) != bytes + sizeof t)
    return damaged(fmt::format("{} bytes where the entry takes {}", st.st_size, bytes + sizeof t));
  if (::pread(fd.get(), &t, sizeof t, static_cast<off_t>(bytes)) != static_cast<ssize_t>(sizeof t))
    return damaged("its trailer cannot be read");
  if (t.magic != trailer_magic || t.version != trailer_version || t.bytes != bytes || !(t.key == key))
    return damaged("not an entry of this format for this key");
  size_t mapped = 0;
  void* at = map_aligned(fd.get(), bytes, mapped, false);
  if (at == nullptr) {
    log::warning(where, "{}: cannot map {} bytes: {}", path.string(), bytes, std::strerror(errno));
    ++misses_;
    return nullptr;
  }
  auto entry = std::make_shared<mapped_entry>(at, mapped, bytes);
  // Blocks the page cache holds in small folios are read again into huge ones before anything reads them (a decode
  // step streams them 5% slower otherwise: util/huge_file_pages.hpp). Where that changed nothing for a whole entry
  // (a file system that gives no huge folios, such as tmpfs with shmem_enabled "never"), later entries are not tried.
  if (reread_futile_.load()) {
    util::populate_for_reading(at, bytes);
  } else {
    const util::huge_page_reread reread = util::read_again_in_huge_pages(fd.get(), at, bytes);
    reread_blocks_ += static_cast<int64_t>(reread.small_before);
    if (reread.small_before > 0 && reread.small_after == reread.small_before &&
        reread.small_before == bytes / util::huge_page_bytes)
      reread_futile_ = true;
    const auto mib = [](size_t blocks) { return blocks * (util::huge_page_bytes >> 20); };
    if (reread.small_after > 0 && !told_small_.exchange(true))
      log::warning(where,
                   "{}: {} MiB of it stay in 4 KiB pages after reading them again from the file, and a decode step "
                   "reads weights in small pages slower (a 1.1B model's decode, from a cache on tmpfs without shmem "
                   "huge pages: about 7%); a cache directory on a disk file system (ACTORLLM_PACKED_WEIGHT_CACHE) or "
                   "shmem huge pages (/sys/kernel/mm/transparent_hugepage/shmem_enabled) avoid it",
                   path.string(), mib(reread.small_after));
    else if (reread.small_before > 0 && !told_reread_.exchange(true))
      log::info(where, "{}: the page cache held {} MiB of it in small pages; read again from the file in 2 MiB pages",
                path.filename().string(), mib(reread.small_before));
  }
  // Reading every byte once also maps every page now, not in the first decode step.
  if (!(digest_of({static_cast<const std::byte*>(at), bytes}, pool) == t.data))
    return damaged("its bytes do not match their digest");
  lock_in_memory(at, bytes);
  ::futimens(fd.get(), nullptr);  // recently used (eviction goes by it); an entry of another user's stays as it is
  ++hits_;
  if (!told_hit_.exchange(true))
    log::info(where, "mapping packed weights from {}", config_.dir.string());
  return entry;
}

void packed_weight_cache::disable(const std::string& why) {
  if (!disabled_.exchange(true))
    log::warning(where, "{}; packed weights are not cached in this process", why);
}

void packed_weight_cache::evict_for(uint64_t incoming) {
  struct entry {
    std::filesystem::file_time_type used;
    uint64_t size;
    std::filesystem::path path;
  };
  std::vector<entry> entries;
  std::vector<std::filesystem::path> records;
  uint64_t total = 0;
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& e : std::filesystem::directory_iterator(config_.dir, ec)) {
    std::error_code e_ec;
    const std::string name = e.path().filename().string();
    const auto used = e.last_write_time(e_ec);
    const uint64_t size = e.is_regular_file(e_ec) ? e.file_size(e_ec) : 0;
    if (e_ec)
      continue;
    if (name.find(".tmp.") != std::string::npos) {
      if (now - used > std::chrono::hours(1))  // left by a process that died while writing it
        std::filesystem::remove(e.path(), e_ec);
      continue;
    }
    if (e.path().extension() == source_extension)
      records.push_back(e.path());
    else if (e.path().extension() == entry_extension)
      entries.push_back({used, size, e.path()});
  }
  auto remove_entry = [&](const std::filesystem::path& panels) {
    std::error_code r_ec;
    const bool removed = std::filesystem::remove(panels, r_ec);
    std::filesystem::remove(std::filesystem::path(panels).replace_extension(source_extension), r_ec);
    return removed;
  };
  // Entries whose checkpoint is gone or changed are never mapped again: they go first, whatever the space.
  std::vector<std::filesystem::path> stale;
  for (const std::filesystem::path& record : records) {
    std::vector<file_origin> sources;
    const std::filesystem::path panels = std::filesystem::path(record).replace_extension(entry_extension);
    if (!std::filesystem::exists(panels, ec)) {
      std::filesystem::remove(record, ec);  // the entry went without it
      continue;
    }
    if (!read_source_record(record, sources))
      continue;
    const auto changed =
        std::find_if(sources.begin(), sources.end(), [](const file_origin& o) { return !source_unchanged(o); });
    if (changed == sources.end())
      continue;
    remove_entry(panels);
    stale.push_back(panels);
    log::info(where, "removed {}: {} is gone or changed since it was packed", panels.filename().string(),
              changed->path);
  }
  std::erase_if(entries, [&](const entry& e) { return std::find(stale.begin(), stale.end(), e.path) != stale.end(); });
  for (const entry& e : entries)
    total += e.size;
  std::sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) { return a.used < b.used; });
  for (const entry& e : entries) {
    if (total + incoming <= config_.max_bytes)
      break;
    if (remove_entry(e.path)) {
      total -= e.size;
      log::info(where, "evicted {} ({} MiB, least recently used)", e.path.filename().string(), e.size >> 20);
    }
  }
}

void packed_weight_cache::record_sources(const util::digest128& key, const std::vector<file_origin>& sources) const {
  if (sources.empty())
    return;
  const std::filesystem::path final_path = std::filesystem::path(entry_path(key)).replace_extension(source_extension);
  const std::filesystem::path tmp = temporary_path(key);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << source_record(sources);
    if (!out.flush())
      return;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, final_path, ec);
  if (ec)
    std::filesystem::remove(tmp, ec);
}

std::unique_ptr<packed_weight_cache::pending_entry> packed_weight_cache::begin_store(const util::digest128& key,
                                                                                     size_t bytes,
                                                                                     std::vector<file_origin> sources) {
  const uint64_t incoming = bytes + sizeof(trailer);
  if (disabled_.load() || bytes == 0 || incoming > config_.max_bytes)
    return nullptr;
  const std::filesystem::path tmp = temporary_path(key);
  {
    std::lock_guard lock(store_mutex_);
    std::error_code ec;
    std::filesystem::create_directories(config_.dir, ec);
    if (ec) {
      disable(fmt::format("cannot create {}: {}", config_.dir.string(), ec.message()));
      return nullptr;
    }
    evict_for(incoming);
    struct statvfs fs {};
    if (::statvfs(config_.dir.c_str(), &fs) == 0 &&
        static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize < incoming + free_space_margin) {
      disable(fmt::format("{} has too little free space for {} MiB more", config_.dir.string(), incoming >> 20));
      return nullptr;
    }
  }
  util::file_descriptor fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  // Blocks reserved up front where the file system can (no write then fails for space); the size alone elsewhere.
  const bool sized = fd.get() >= 0 && (::fallocate(fd.get(), 0, 0, static_cast<off_t>(incoming)) == 0 ||
                                       ::ftruncate(fd.get(), static_cast<off_t>(incoming)) == 0);
  size_t mapped = 0;
  void* at = sized ? map_aligned(fd.get(), bytes, mapped, true) : nullptr;
  if (at == nullptr) {
    const int e = errno;
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    disable(fmt::format("cannot make {}: {}", tmp.string(), std::strerror(e)));
    return nullptr;
  }
  return std::unique_ptr<pending_entry>(
      new pending_entry(*this, key, bytes, fd.release(), tmp, at, mapped, std::move(sources)));
}

packed_weight_cache::pending_entry::pending_entry(packed_weight_cache& cache, util::digest128 key, size_t bytes, int fd,
                                                  std::filesystem::path tmp, void* at, size_t mapped,
                                                  std::vector<file_origin> sources)
    : cache_(cache),
      sources_(std::move(sources)),
      key_(key),
      bytes_(bytes),
      fd_(fd),
      tmp_(std::move(tmp)),
      at_(at),
      mapped_(mapped) {}

packed_weight_cache::pending_entry::~pending_entry() {
  if (at_ != nullptr)
    ::munmap(at_, mapped_);
  if (fd_ >= 0) {
    ::close(fd_);
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

std::shared_ptr<buffer> packed_weight_cache::pending_entry::commit(thread_pool& pool) {
  trailer t;
  t.magic = trailer_magic;
  t.version = trailer_version;
  t.bytes = bytes_;
  t.key = key_;
  t.data = digest_of({data(), bytes_}, pool);
  const bool sealed = ::pwrite(fd_, &t, sizeof t, static_cast<off_t>(bytes_)) == static_cast<ssize_t>(sizeof t);
  const int e = errno;
  // Read-only from here: the serving process maps the entry as a later run will. Should that mapping fail (no
  // address space left), the writable one serves instead: the same pages.
  size_t mapped = 0;
  void* at = map_aligned(fd_, bytes_, mapped, false);
  if (at != nullptr)
    ::munmap(at_, mapped_);
  else
    mapped = mapped_;
  auto entry = std::make_shared<mapped_entry>(at != nullptr ? at : at_, mapped, bytes_);
  at_ = nullptr;
  lock_in_memory(entry->data(), bytes_);
  ::close(std::exchange(fd_, -1));
  std::error_code ec;
  if (sealed)
    std::filesystem::rename(tmp_, cache_.entry_path(key_), ec);
  if (!sealed || ec) {
    std::error_code r_ec;
    std::filesystem::remove(tmp_, r_ec);  // the mapping keeps the bytes
    cache_.disable(fmt::format("cannot write {}: {}", tmp_.string(), std::strerror(sealed ? ec.value() : e)));
    return entry;
  }
  cache_.record_sources(key_, sources_);
  ++cache_.stored_;
  if (!cache_.told_store_.exchange(true))
    log::info(where,
              "writing packed weights to {} (later runs map them instead of packing; "
              "ACTORLLM_PACKED_WEIGHT_CACHE=off turns this off)",
              cache_.config_.dir.string());
  return entry;
}

packed_weight_cache::counts packed_weight_cache::totals() const {
  return {hits_.load(), misses_.load(), stored_.load(), reread_blocks_.load()};
}

}  // namespace actorllm::cpu
