// The packed-weight cache: entries written and found whole, damaged ones refused, the least recently used evicted,
// its settings read from the environment, and the CPU backend mapping packed weights from it (by file and place, or
// by bytes) with exactly the bytes packing gives.
#include "kernels/cpu/packed_weight_cache.hpp"
#include "kernels/cpu/compact_panels.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_quantized.hpp"
#include "support/huge_pages.hpp"
#include "support/scoped_env.hpp"
#include "support/test_paths.hpp"
#include "util/file_descriptor.hpp"
#include "util/huge_file_pages.hpp"
#include "util/thread_pool.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace actorllm;
using test::scoped_env;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> b(n);
  for (auto& x : b)
    x = static_cast<std::byte>(rng());
  return b;
}

util::digest128 key_of(uint64_t n) {
  util::fast_digest d;
  d.add(n);
  return d.value();
}

// Stores `bytes` under `key` through begin_store / commit; the committed mapping.
std::shared_ptr<buffer> store(cpu::packed_weight_cache& cache, const util::digest128& key,
                              const std::vector<std::byte>& bytes, thread_pool& pool) {
  auto entry = cache.begin_store(key, bytes.size());
  REQUIRE(entry != nullptr);
  std::memcpy(entry->data(), bytes.data(), bytes.size());
  return entry->commit(pool);
}

bool same_bytes(const std::shared_ptr<buffer>& b, const std::vector<std::byte>& bytes) {
  return b != nullptr && b->size() == bytes.size() && std::memcmp(b->data(), bytes.data(), bytes.size()) == 0;
}

fs::path only_entry(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir))
    found.push_back(e.path());
  REQUIRE(found.size() == 1);
  return found.front();
}

}  // namespace

TEST_CASE("packed_weight_cache: an entry committed is found with the same bytes, in a later cache too [asan]") {
  const fs::path dir = test::make_temp_dir("pwc");
  thread_pool pool(2);
  const auto bytes = pattern((size_t{3} << 20) + 100, 1);  // past one 2 MiB page, not a whole number of pages
  cpu::packed_weight_cache cache({dir / "cache", uint64_t{1} << 30});
  CHECK(cache.find(key_of(1), bytes.size(), pool) == nullptr);  // no directory yet
  const std::shared_ptr<buffer> committed = store(cache, key_of(1), bytes, pool);
  CHECK(same_bytes(committed, bytes));
  CHECK(reinterpret_cast<uintptr_t>(committed->data()) % (size_t{2} << 20) == 0);
  CHECK(only_entry(dir / "cache").extension() == ".panels");  // no temporary file left behind

  cpu::packed_weight_cache later({dir / "cache", uint64_t{1} << 30});
  const std::shared_ptr<buffer> found = later.find(key_of(1), bytes.size(), pool);
  CHECK(same_bytes(found, bytes));
  CHECK(later.find(key_of(2), bytes.size(), pool) == nullptr);      // another key
  CHECK(later.find(key_of(1), bytes.size() - 1, pool) == nullptr);  // another size: damaged, removed
  CHECK(later.totals().hits == 1);
  CHECK(later.totals().misses == 2);
  CHECK(cache.totals().stored == 1);
  CHECK(same_bytes(found, bytes));  // the mapping outlives the entry's file
}

TEST_CASE("packed_weight_cache: an entry the page cache holds in small pages is found in huge pages, same bytes") {
  const fs::path dir = test::make_temp_dir("pwc");
  thread_pool pool(2);
  constexpr size_t blocks = 4;
  const auto bytes = pattern(blocks * util::huge_page_bytes, 7);
  cpu::packed_weight_cache cache({dir, uint64_t{1} << 30});
  store(cache, key_of(1), bytes, pool);  // its mapping dropped at once
  {
    // Written back, dropped, then read 4 KiB at a time without readahead: small folios, as a plain reader leaves.
    const util::file_descriptor fd(::open(only_entry(dir).c_str(), O_RDONLY));
    REQUIRE(fd.get() >= 0);
    REQUIRE(::fsync(fd.get()) == 0);
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_RANDOM);
    std::vector<char> page(4096);
    for (size_t off = 0; off < bytes.size(); off += page.size())
      REQUIRE(::pread(fd.get(), page.data(), page.size(), static_cast<off_t>(off)) == 4096);
  }
  cpu::packed_weight_cache later({dir, uint64_t{1} << 30});
  const std::shared_ptr<buffer> found = later.find(key_of(1), bytes.size(), pool);
  REQUIRE(same_bytes(found, bytes));
  const auto small = util::count_small_page_blocks(found->data(), bytes.size());
  if (!small) {
    MESSAGE("skipped: this kernel has no PAGEMAP_SCAN (Linux 6.7)");
    return;
  }
  CHECK(later.totals().reread_blocks == static_cast<int64_t>(blocks));  // every block was found small
  if (!test::fresh_file_maps_huge(dir))
    MESSAGE("skipped: this kernel maps no file read with MADV_HUGEPAGE in huge pages here: ", dir.string());
  else
    CHECK(*small == 0);
}

TEST_CASE("packed_weight_cache: on a file system with no huge pages, one entry is read again and no more") {
  // tmpfs with shmem huge pages off: the page cache never holds huge folios there, and dropping them does nothing.
  std::ifstream shmem("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string setting;
  std::getline(shmem, setting);
  if (!fs::is_directory("/dev/shm") || setting.find("[never]") == std::string::npos) {
    MESSAGE("skipped: needs /dev/shm with shmem_enabled [never]; here: '", setting, "'");
    return;
  }
  const fs::path dir = fs::path("/dev/shm") / test::make_temp_dir("pwc").filename();
  struct remove_dir {
    fs::path p;
    ~remove_dir() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{dir};
  thread_pool pool(2);
  constexpr size_t blocks = 2;
  const auto a = pattern(blocks * util::huge_page_bytes, 11), b = pattern(blocks * util::huge_page_bytes, 12);
  cpu::packed_weight_cache cache({dir, uint64_t{1} << 30});
  store(cache, key_of(1), a, pool);
  store(cache, key_of(2), b, pool);
  cpu::packed_weight_cache later({dir, uint64_t{1} << 30});
  const auto first = later.find(key_of(1), a.size(), pool);
  const auto second = later.find(key_of(2), b.size(), pool);
  CHECK(same_bytes(first, a));
  CHECK(same_bytes(second, b));
  if (!util::count_small_page_blocks(first->data(), a.size())) {
    MESSAGE("skipped: this kernel has no PAGEMAP_SCAN (Linux 6.7)");
    return;
  }
  CHECK(util::count_small_page_blocks(first->data(), a.size()) == blocks);
  CHECK(later.totals().reread_blocks == static_cast<int64_t>(blocks));  // the first entry's, not the second's
}

TEST_CASE(
    "packed_weight_cache: a damaged or cut entry is refused and removed, and an uncommitted one leaves nothing "
    "[asan]") {
  const fs::path dir = test::make_temp_dir("pwc");
  thread_pool pool(2);
  const auto bytes = pattern(size_t{1} << 20, 2);
  cpu::packed_weight_cache cache({dir, uint64_t{1} << 30});

  store(cache, key_of(1), bytes, pool);
  const fs::path path = only_entry(dir);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12345);
    f.put(static_cast<char>(bytes[12345] ^ std::byte{0x5a}));
  }
  CHECK(cache.find(key_of(1), bytes.size(), pool) == nullptr);
  CHECK_FALSE(fs::exists(path));

  store(cache, key_of(1), bytes, pool);
  fs::resize_file(path, fs::file_size(path) - 10);  // the trailer cut
  CHECK(cache.find(key_of(1), bytes.size(), pool) == nullptr);
  CHECK_FALSE(fs::exists(path));

  {
    auto entry = cache.begin_store(key_of(3), bytes.size());
    REQUIRE(entry != nullptr);
    std::memcpy(entry->data(), bytes.data(), bytes.size());
  }  // dropped without commit
  CHECK(fs::is_empty(dir));
  CHECK(cache.find(key_of(3), bytes.size(), pool) == nullptr);
}

TEST_CASE(
    "packed_weight_cache: past its limit the least recently used entries go, and one too large is not stored [asan]") {
  const fs::path dir = test::make_temp_dir("pwc");
  thread_pool pool(2);
  const size_t n = size_t{1} << 20;
  // Room for three entries (each n bytes and a 64-byte trailer), not four.
  cpu::packed_weight_cache cache({dir, 3 * (n + 64) + 100});
  const auto now = fs::file_time_type::clock::now();
  for (uint64_t k = 1; k <= 3; ++k) {
    store(cache, key_of(k), pattern(n, k), pool);
    for (const auto& e : fs::directory_iterator(dir))  // entry k last used 10 - k minutes ago: 1 is the oldest
      if (e.path().filename().string().rfind(key_of(k).hex(), 0) == 0)
        fs::last_write_time(e.path(), now - std::chrono::minutes(10 - k));
  }
  REQUIRE(cache.find(key_of(1), n, pool) != nullptr);  // used now: 2 is the least recently used
  store(cache, key_of(4), pattern(n, 4), pool);
  CHECK(cache.find(key_of(2), n, pool) == nullptr);
  CHECK(same_bytes(cache.find(key_of(1), n, pool), pattern(n, 1)));
  CHECK(same_bytes(cache.find(key_of(3), n, pool), pattern(n, 3)));
  CHECK(same_bytes(cache.find(key_of(4), n, pool), pattern(n, 4)));
  CHECK(cache.begin_store(key_of(5), 4 * n) == nullptr);  // larger than the whole cache
}

namespace {

// What a loader records of `path` (buffer::origin): its identity now, at offset 0.
file_origin origin_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return file_origin_of(st, fs::absolute(path).string());
}

}  // namespace

TEST_CASE(
    "packed_weight_cache: entries of a checkpoint since changed or deleted are removed at the next store [asan]") {
  const fs::path dir = test::make_temp_dir("pwc");
  thread_pool pool(2);
  const size_t n = 64 * 1024;
  const fs::path changed = dir / "changed model.safetensors", deleted = dir / "deleted.safetensors",
                 kept = dir / "kept.safetensors";
  for (const fs::path& f : {changed, deleted, kept})
    std::ofstream(f) << "checkpoint bytes";
  cpu::packed_weight_cache cache({dir / "cache", uint64_t{1} << 30});
  auto store_from = [&](uint64_t k, std::vector<file_origin> sources) {
    auto entry = cache.begin_store(key_of(k), n, std::move(sources));
    REQUIRE(entry != nullptr);
    std::memcpy(entry->data(), pattern(n, k).data(), n);
    entry->commit(pool);
  };
  store_from(1, {origin_of(changed)});
  store_from(2, {origin_of(kept), origin_of(deleted)});
  store_from(3, {origin_of(kept)});
  store_from(4, {});  // known by its bytes: no source to go stale
  CHECK(fs::exists(dir / "cache" / (key_of(1).hex() + ".source")));

  std::ofstream(changed, std::ios::app) << " and more";  // rewritten: another size and modification time
  fs::remove(deleted);
  store_from(5, {origin_of(kept)});
  CHECK(cache.find(key_of(1), n, pool) == nullptr);
  CHECK(cache.find(key_of(2), n, pool) == nullptr);
  CHECK_FALSE(fs::exists(dir / "cache" / (key_of(1).hex() + ".source")));
  CHECK(same_bytes(cache.find(key_of(3), n, pool), pattern(n, 3)));
  CHECK(same_bytes(cache.find(key_of(4), n, pool), pattern(n, 4)));
  CHECK(same_bytes(cache.find(key_of(5), n, pool), pattern(n, 5)));
}

TEST_CASE("packed_weight_cache: a directory that cannot be made turns storing off, with the weight packed anyway") {
  const fs::path dir = test::make_temp_dir("pwc");
  std::ofstream(dir / "file") << "not a directory";
  cpu::packed_weight_cache cache({dir / "file" / "cache", uint64_t{1} << 30});
  CHECK(cache.begin_store(key_of(1), 4096) == nullptr);
  CHECK(cache.begin_store(key_of(1), 4096) == nullptr);
  CHECK(cache.totals().stored == 0);
}

TEST_CASE("packed_weight_cache_config: read from the environment, bad values refused by name") {
  {
    scoped_env a("ACTORLLM_PACKED_WEIGHT_CACHE", std::nullopt), b("ACTORLLM_PACKED_WEIGHT_CACHE_GB", std::nullopt),
        c("XDG_CACHE_HOME", "/tmp/xdg");
    const auto config = cpu::packed_weight_cache_config::from_environment();
    CHECK(config.dir == fs::path("/tmp/xdg/actorllm/packed-weights"));
    CHECK(config.max_bytes == uint64_t{64} << 30);
  }
  {
    scoped_env a("ACTORLLM_PACKED_WEIGHT_CACHE", std::nullopt), c("XDG_CACHE_HOME", std::nullopt),
        h("HOME", "/home/someone");
    CHECK(cpu::packed_weight_cache_config::from_environment().dir ==
          fs::path("/home/someone/.cache/actorllm/packed-weights"));
  }
  {
    scoped_env a("ACTORLLM_PACKED_WEIGHT_CACHE", "/srv/packed"), b("ACTORLLM_PACKED_WEIGHT_CACHE_GB", "5");
    const auto config = cpu::packed_weight_cache_config::from_environment();
    CHECK(config.dir == fs::path("/srv/packed"));
    CHECK(config.max_bytes == uint64_t{5} << 30);
  }
  {
    scoped_env a("ACTORLLM_PACKED_WEIGHT_CACHE", "off");
    CHECK(cpu::packed_weight_cache_config::from_environment().dir.empty());
  }
  {  // "on" is the default place, not a directory named "on" here
    scoped_env a("ACTORLLM_PACKED_WEIGHT_CACHE", "on"), c("XDG_CACHE_HOME", "/tmp/xdg");
    CHECK(cpu::packed_weight_cache_config::from_environment().dir == fs::path("/tmp/xdg/actorllm/packed-weights"));
  }
  {
    scoped_env a("ACTORLLM_PACKED_WEIGHT_CACHE", "/srv/packed"), b("ACTORLLM_PACKED_WEIGHT_CACHE_GB", "0");
    CHECK(cpu::packed_weight_cache_config::from_environment().dir.empty());
  }
  for (const char* bad : {"", "x", "-1", "2.5", "4G"}) {
    CAPTURE(bad);
    scoped_env a("ACTORLLM_PACKED_WEIGHT_CACHE", "/srv/packed"), b("ACTORLLM_PACKED_WEIGHT_CACHE_GB", bad);
    CHECK_THROWS_WITH_AS(cpu::packed_weight_cache_config::from_environment(),
                         doctest::Contains("ACTORLLM_PACKED_WEIGHT_CACHE_GB"), std::invalid_argument);
  }
  scoped_env a("ACTORLLM_PACKED_WEIGHT_CACHE", "");
  CHECK_THROWS_WITH_AS(cpu::packed_weight_cache_config::from_environment(),
                       doctest::Contains("ACTORLLM_PACKED_WEIGHT_CACHE: empty"), std::invalid_argument);
}

namespace {

// Host bytes that say which file they are (as a weight used in place in its checkpoint does).
class file_bytes final : public buffer {
 public:
  file_bytes(std::vector<std::byte> bytes, std::optional<file_origin> origin)
      : bytes_(std::move(bytes)), origin_(origin) {}
  void* data() override { return bytes_.data(); }
  size_t size() const override { return bytes_.size(); }
  device where() const override { return device{}; }
  std::optional<file_origin> origin() const override { return origin_; }

 private:
  std::vector<std::byte> bytes_;
  std::optional<file_origin> origin_;
};

tensor bf16_weight(int64_t rows, int64_t n_in, uint64_t seed, std::optional<file_origin> origin) {
  tensor t;
  t.type = dtype::bf16;
  t.shape = tensor_shape{rows, n_in};
  auto bytes = pattern(static_cast<size_t>(rows * n_in) * 2, seed);
  for (size_t i = 1; i < bytes.size(); i += 2)  // finite bf16 values: exponent bits below all-ones
    bytes[i] &= std::byte{0x3f};
  t.buf = std::make_shared<file_bytes>(std::move(bytes), origin);
  return t;
}

// The same packed weight: plain panels, or compact ones (where this CPU reads those) of the same stride.
bool same_packed(const tensor& a, const tensor& b) {
  if (a.layout != b.layout || a.dim(0) != b.dim(0))
    return false;
  if (a.layout == tensor_layout::cpu_bf16_panels)
    return std::memcmp(a.data(), b.data(), cpu::bf16_panels_bytes(a.dim(0), a.dim(1))) == 0;
  if (a.layout != tensor_layout::cpu_bf16_compact_panels ||
      cpu::compact_panel_stride(a.data()) != cpu::compact_panel_stride(b.data()))
    return false;
  const size_t n = cpu::compact_panel_stride(a.data()) * static_cast<size_t>((a.dim(0) + 31) / 32);
  return a.buf->size() >= n && b.buf->size() >= n && std::memcmp(a.data(), b.data(), n) == 0;
}

}  // namespace

TEST_CASE("cpu_backend with a packed-weight cache: the same packed bytes, mapped on the second import [asan]") {
  if (!cpu::bf16_panels_preferred()) {
    MESSAGE("skipped: this CPU or build has no AVX512-BF16 kernels, so no weight is packed");
    return;
  }
  const fs::path dir = test::make_temp_dir("pwc");
  auto cache = std::make_shared<cpu::packed_weight_cache>(cpu::packed_weight_cache_config{dir, uint64_t{1} << 30});
  cpu::cpu_backend plain(2, nullptr), cold(2, cache);
  const file_origin in_file{1, 2, 3 << 20, 4, 5, 1024, "/models/m/model.safetensors"};

  SUBCASE("a weight known by its bytes") {
    const tensor w = bf16_weight(96, 256, 1, std::nullopt);
    const tensor reference = plain.import_linear_weight(w);
    CHECK(same_packed(cold.import_linear_weight(w), reference));
    CHECK(cache->totals().stored == 1);
    cpu::cpu_backend warm(2, cache);
    CHECK(same_packed(warm.import_linear_weight(bf16_weight(96, 256, 1, std::nullopt)), reference));
    CHECK(cache->totals().hits == 1);
    // Other bytes of the same shape are another entry.
    const tensor other = bf16_weight(96, 256, 2, std::nullopt);
    CHECK(same_packed(warm.import_linear_weight(other), plain.import_linear_weight(other)));
    CHECK(cache->totals().stored == 2);
  }
  SUBCASE("a weight known by its file and place, which is not read on a hit") {
    const tensor w = bf16_weight(96, 256, 1, in_file);
    const tensor reference = plain.import_linear_weight(w);
    CHECK(same_packed(cold.import_linear_weight(w), reference));
    // The same file and place: the cached panels, whatever bytes are at hand (they are the file's, unchanged).
    CHECK(same_packed(cold.import_linear_weight(bf16_weight(96, 256, 9, in_file)), reference));
    CHECK(cache->totals().hits == 1);
    // The file changed (its modification time), or another place in it: packed again.
    file_origin touched = in_file;
    touched.modified_ns += 1;
    const tensor changed = bf16_weight(96, 256, 3, touched);
    CHECK(same_packed(cold.import_linear_weight(changed), plain.import_linear_weight(changed)));
    file_origin further = in_file;
    further.offset += 96 * 256 * 2;
    const tensor next = bf16_weight(96, 256, 4, further);
    CHECK(same_packed(cold.import_linear_weight(next), plain.import_linear_weight(next)));
    CHECK(cache->totals().stored == 3);
  }
  // A weight named by `named` is its own entry, found on a hit without reading the bytes at hand; weights named by
  // each of `others` (the same place differently read) are other bytes, packed from their own.
  auto check_named_apart = [&](const file_origin& named, std::initializer_list<file_origin> others, uint64_t seed) {
    const tensor w = bf16_weight(96, 256, seed, named);
    const tensor reference = plain.import_linear_weight(w);
    CHECK(same_packed(cold.import_linear_weight(w), reference));
    CHECK(same_packed(cold.import_linear_weight(bf16_weight(96, 256, seed + 1, named)), reference));
    CHECK(cache->totals().hits == 1);
    for (const file_origin& o : others) {
      const tensor t = bf16_weight(96, 256, seed += 2, o);  // bytes of its own, not those the hit came with
      CHECK(same_packed(cold.import_linear_weight(t), plain.import_linear_weight(t)));
    }
    CHECK(cache->totals().hits == 1);
    CHECK(cache->totals().stored == static_cast<int64_t>(1 + others.size()));
  };
  SUBCASE("a strided slice of a file (a tp rank's columns): its own entry, not read on a hit") {
    file_origin columns = in_file, wider = in_file;
    columns.row_stride = 512 * 2;  // 256 of a row's 512 bf16 columns
    wider.row_stride = 768 * 2;
    check_named_apart(columns, {in_file, wider}, 7);  // the contiguous run at the same offset, another stride
  }
  SUBCASE("a weight made from its file's bytes (quantized at load): its own entry, not read on a hit") {
    file_origin quantized = in_file, other = in_file;
    quantized.transform = 0x46503801;
    other.transform = 0x46503802;
    check_named_apart(quantized, {in_file, other}, 12);  // the bytes as stored there, another transform of them
  }
  SUBCASE("stacked parts") {
    const tensor q = bf16_weight(64, 256, 5, in_file), k = bf16_weight(32, 256, 6, std::nullopt);
    const std::vector<tensor> parts{q, k};
    const tensor reference = plain.import_stacked_linear_weight(parts);
    CHECK(same_packed(cold.import_stacked_linear_weight(parts), reference));
    CHECK(same_packed(cold.import_stacked_linear_weight(parts), reference));
    CHECK(cache->totals().hits == 1);
    CHECK(cache->totals().stored == 1);
  }
}

TEST_CASE("cpu_backend with a packed-weight cache: a quantized weight named by its origin is mapped unread [asan]") {
  if (!cpu::have_quantized_avx512_kernels()) {
    MESSAGE(
        "skipped: this CPU or build has no AVX-512 quantized kernels, so a weight-only quantized weight is "
        "dequantized to bf16 at import, not kept as panels");
    return;
  }
  const fs::path dir = test::make_temp_dir("pwc-quantized");
  auto cache = std::make_shared<cpu::packed_weight_cache>(cpu::packed_weight_cache_config{dir, uint64_t{1} << 30});
  cpu::cpu_backend plain(2, nullptr), cold(2, cache);
  // A weight as a loader leaves it: sizes, the origin, and its codes unread until read() (counted).
  int reads = 0;
  auto unread_weight = [&](uint64_t origin, int bits, int64_t group, uint64_t seed) {
    std::vector<float> f(static_cast<size_t>(40 * 256));
    std::mt19937_64 rng(seed);
    for (float& v : f)
      v = static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) * 1e-4f;
    const quantized_linear full = quantize_linear_rtn(f.data(), 40, 256, bits, group, false);
    quantized_linear q;
    q.bits = full.bits;
    q.n_out = full.n_out;
    q.n_in = full.n_in;
    q.group_size = full.group_size;
    q.origin = key_of(origin);
    q.unread = [&reads, full](quantized_linear& w) {
      ++reads;
      w.codes = full.codes;
      w.scales = full.scales;
      w.zeros = full.zeros;
    };
    return q;
  };
  auto panel_bytes = [](const tensor& t) {
    return std::vector<std::byte>(static_cast<const std::byte*>(t.buf->data()),
                                  static_cast<const std::byte*>(t.buf->data()) + t.buf->size());
  };
  for (int bits : {4, 8}) {
    INFO("bits " << bits);
    quantized_linear reference_weight = unread_weight(100 + static_cast<uint64_t>(bits), bits, 128, 1);
    reference_weight.read();
    const tensor reference = plain.import_quantized_linear(reference_weight);
    const int64_t stored = cache->totals().stored, hits = cache->totals().hits;
    // Not in the cache yet: nothing found, and the weight is still unread.
    quantized_linear q = unread_weight(100 + static_cast<uint64_t>(bits), bits, 128, 1);
    CHECK(cold.find_quantized_linear(q).buf == nullptr);
    CHECK(q.unread);
    q.read();
    const tensor packed = cold.import_quantized_linear(q);
    CHECK(cache->totals().stored == stored + 1);
    CHECK(panel_bytes(packed) == panel_bytes(reference));
    // A later backend finds it by the origin alone: the same bytes, nothing read.
    cpu::cpu_backend warm(2, cache);
    reads = 0;
    quantized_linear again = unread_weight(100 + static_cast<uint64_t>(bits), bits, 128, 1);
    const tensor mapped = warm.find_quantized_linear(again);
    REQUIRE(mapped.buf != nullptr);
    CHECK(reads == 0);
    CHECK(again.unread);
    CHECK(mapped.layout == reference.layout);
    CHECK(panel_bytes(mapped) == panel_bytes(reference));
    CHECK(cache->totals().hits == hits + 1);
    // The product through the mapped layout is the packed one's, bit for bit.
    const std::vector<float> x(256, 0.25f);
    std::vector<float> y_ref(40), y_mapped(40);
    tensor xt = plain.alloc(dtype::f32, tensor_shape{1, 256});
    plain.upload(xt, x.data(), x.size() * sizeof(float));
    tensor yr = plain.alloc(dtype::f32, tensor_shape{1, 40}), ym = warm.alloc(dtype::f32, tensor_shape{1, 40});
    plain.matmul(xt, reference, tensor{}, yr);
    warm.matmul(xt, mapped, tensor{}, ym);
    plain.download(yr, y_ref.data(), y_ref.size() * sizeof(float));
    warm.download(ym, y_mapped.data(), y_mapped.size() * sizeof(float));
    CHECK(y_ref == y_mapped);
    // Another origin, or another shape under the same origin: not found.
    CHECK(warm.find_quantized_linear(unread_weight(999, bits, 128, 1)).buf == nullptr);
    CHECK(warm.find_quantized_linear(unread_weight(100 + static_cast<uint64_t>(bits), bits, 64, 1)).buf == nullptr);
    // No origin, or no cache: never found.
    quantized_linear nameless = unread_weight(100 + static_cast<uint64_t>(bits), bits, 128, 1);
    nameless.origin.reset();
    CHECK(warm.find_quantized_linear(nameless).buf == nullptr);
    CHECK(plain.find_quantized_linear(unread_weight(100 + static_cast<uint64_t>(bits), bits, 128, 1)).buf == nullptr);
  }
}
