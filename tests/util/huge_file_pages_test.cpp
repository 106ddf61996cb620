// count_small_page_blocks tells blocks mapped in 4 KiB pages from 2 MiB ones; read_again_in_huge_pages turns a file
// mapping's small blocks into huge ones where the kernel can map that file in huge pages at all, keeping its bytes.
#include "util/huge_file_pages.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "support/huge_pages.hpp"
#include "support/test_paths.hpp"
#include "util/populate_pages.hpp"

namespace {

using actorllm::util::huge_page_bytes;

constexpr size_t n_blocks = 4, bytes = n_blocks * huge_page_bytes;

// Byte i of the test file.
unsigned char byte_at(size_t i) { return static_cast<unsigned char>((i * 131 + i / 4096) & 0xff); }

bool bytes_intact(const void* m) {
  const auto* p = static_cast<const unsigned char*>(m);
  for (size_t i = 0; i < bytes; ++i)
    if (p[i] != byte_at(i))
      return false;
  return true;
}

}  // namespace

TEST_CASE("count_small_page_blocks counts the whole 2 MiB blocks that hold pages mapped small") {
  void* at = actorllm::test::reserve_huge_aligned(bytes);
  void* m = ::mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  REQUIRE(m == at);
  ::madvise(m, bytes, MADV_NOHUGEPAGE);
  const auto untouched = actorllm::util::count_small_page_blocks(m, bytes);
  if (!untouched) {
    MESSAGE("skipped: this kernel has no PAGEMAP_SCAN (Linux 6.7)");
    ::munmap(m, bytes);
    return;
  }
  CHECK(*untouched == 0);  // nothing present
  auto* p = static_cast<char*>(m);
  p[0] = 1;                               // block 0
  p[2 * huge_page_bytes + 4096 * 7] = 1;  // block 2
  p[3 * huge_page_bytes - 1] = 1;         // block 2 again
  CHECK(actorllm::util::count_small_page_blocks(m, bytes) == 2);
  CHECK(actorllm::util::count_small_page_blocks(m, huge_page_bytes) == 1);         // block 0 alone
  CHECK(actorllm::util::count_small_page_blocks(m, huge_page_bytes - 4096) == 0);  // no whole block
  std::memset(p, 1, bytes);
  CHECK(actorllm::util::count_small_page_blocks(m, bytes) == n_blocks);
  ::munmap(m, bytes);
}

TEST_CASE("read_again_in_huge_pages maps a file written in small pieces in huge pages, with the same bytes") {
  const auto dir = actorllm::test::make_temp_dir("huge_file_pages");
  const auto path = dir / "panels.bin";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  // 4 KiB writes: the page cache keeps the file in 4 KiB folios; written back (fsync), so that they can be dropped.
  std::vector<unsigned char> page(4096);
  for (size_t off = 0; off < bytes; off += page.size()) {
    for (size_t j = 0; j < page.size(); ++j)
      page[j] = byte_at(off + j);
    REQUIRE(::pwrite(fd, page.data(), page.size(), static_cast<off_t>(off)) == static_cast<ssize_t>(page.size()));
  }
  REQUIRE(::fsync(fd) == 0);

  void* m = actorllm::test::map_file_huge_aligned(fd, bytes);
  REQUIRE(actorllm::util::populate_for_reading(m, bytes));
  const auto before = actorllm::util::count_small_page_blocks(m, bytes);
  if (!before) {
    MESSAGE("skipped: this kernel has no PAGEMAP_SCAN (Linux 6.7)");
    ::munmap(m, bytes);
  } else {
    const actorllm::util::huge_page_reread r = actorllm::util::read_again_in_huge_pages(fd, m, bytes);
    CHECK(r.supported);
    CHECK(r.small_before == *before);
    CHECK(bytes_intact(m));
    ::munmap(m, bytes);
    if (!actorllm::test::fresh_file_maps_huge(dir)) {
      MESSAGE(
          "skipped: this kernel maps no file read with MADV_HUGEPAGE in huge pages here (transparent huge pages "
          "off, or a file system without large folios): ",
          path.string());
    } else {
      CHECK(*before == n_blocks);  // the 4 KiB writes' folios, mapped small
      CHECK(r.small_after == 0);
    }
  }
  ::close(fd);
}
