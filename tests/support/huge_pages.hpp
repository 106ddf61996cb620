// Test helpers for mappings in 2 MiB pages: an address range at a 2 MiB boundary, a file mapped there read-only and
// advised MADV_HUGEPAGE (as the packed-weight cache maps its entries), and whether this machine maps a file read that
// way in huge pages at all (the THP setting, the file system's large folios), the control of a test that expects it.
#pragma once

#include "util/file_descriptor.hpp"
#include "util/huge_file_pages.hpp"
#include "util/populate_pages.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

namespace actorllm::test {

/// `bytes` of address space reserved (no access) at a 2 MiB boundary, for a MAP_FIXED mapping; munmap(p, bytes).
inline void* reserve_huge_aligned(size_t bytes) {
  constexpr size_t huge = util::huge_page_bytes;
  void* r = ::mmap(nullptr, bytes + huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(r != MAP_FAILED);
  const auto base = reinterpret_cast<uintptr_t>(r);
  const uintptr_t at = (base + huge - 1) / huge * huge;
  if (at > base)
    ::munmap(r, at - base);
  ::munmap(reinterpret_cast<void*>(at + bytes), base + huge - at);
  return reinterpret_cast<void*>(at);
}

/// The first `bytes` of `fd` mapped read-only at a 2 MiB boundary, advised MADV_HUGEPAGE before any fault;
/// munmap(p, bytes).
inline void* map_file_huge_aligned(int fd, size_t bytes) {
  void* at = reserve_huge_aligned(bytes);
  void* m = ::mmap(at, bytes, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  REQUIRE(m == at);
  ::madvise(m, bytes, MADV_HUGEPAGE);
  return m;
}

/// Whether a file written in `dir`, written back and dropped from the page cache, then read through
/// map_file_huge_aligned, is mapped all in huge pages (false too where the kernel cannot tell). The file is removed.
inline bool fresh_file_maps_huge(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "huge_pages_control.bin";
  const size_t n = 2 * util::huge_page_bytes;
  {
    std::ofstream out(path, std::ios::binary);
    const std::vector<char> ones(n, 1);
    out.write(ones.data(), static_cast<std::streamsize>(n));
  }
  const util::file_descriptor fd(::open(path.c_str(), O_RDONLY));
  REQUIRE(fd.get() >= 0);
  REQUIRE(::fsync(fd.get()) == 0);
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  void* m = map_file_huge_aligned(fd.get(), n);
  util::populate_for_reading(m, n);
  const auto small = util::count_small_page_blocks(m, n);
  ::munmap(m, n);
  std::filesystem::remove(path);
  return small == size_t{0};
}

}  // namespace actorllm::test
