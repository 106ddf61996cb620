// populate_for_reading maps a file mapping's pages in one call: they count in the process's resident set at once,
// without being read.
#include "util/populate_pages.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_paths.hpp"

namespace {

// The resident pages of [p, p + bytes) that this process maps (mincore counts page-cache pages, mapped or not; the
// kernel's per-mapping Rss in /proc/self/smaps counts only mapped ones).
size_t mapped_resident_kib(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto start = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {
      inside = lo <= start && start < hi;
      continue;
    }
    size_t kib = 0;
    if (inside && std::sscanf(line.c_str(), "Rss: %zu kB", &kib) == 1)
      return kib;
  }
  return 0;
}

}  // namespace

TEST_CASE("populate_for_reading maps every page of a range of a file mapping in one call") {
  const auto dir = actorllm::test::make_temp_dir("populate");
  const auto path = dir / "weights.bin";
  constexpr size_t bytes = size_t{8} << 20;
  {
    std::ofstream out(path, std::ios::binary);
    const std::vector<char> page(4096, 7);
    for (size_t i = 0; i < bytes / page.size(); ++i)
      out.write(page.data(), static_cast<std::streamsize>(page.size()));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  REQUIRE(map != MAP_FAILED);
  CHECK(mapped_resident_kib(map) == 0);  // nothing touched yet

  // From an unaligned start inside the first page to the middle of the last: every page it touches is mapped.
  const auto* first = static_cast<const std::byte*>(map) + 100;
  if (!actorllm::util::populate_for_reading(first, bytes - 100 - 2048)) {
    MESSAGE("skipped: this kernel has no MADV_POPULATE_READ (Linux 5.14)");
  } else {
    CHECK(mapped_resident_kib(map) == bytes / 1024);
  }
  CHECK(actorllm::util::populate_for_reading(first, 0));  // nothing to do
  ::munmap(map, bytes);
}
