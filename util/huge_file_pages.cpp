#include "util/huge_file_pages.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <vector>

#include "util/file_descriptor.hpp"
#include "util/populate_pages.hpp"

namespace actorllm::util {
namespace {

// The PAGEMAP_SCAN ABI (include/uapi/linux/fs.h, Linux 6.7), spelled out: Debian 12's kernel headers predate it.
struct page_region {
  uint64_t start, end, categories;
};
struct pm_scan_arg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
  uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
constexpr unsigned long pagemap_scan = _IOWR('f', 16, pm_scan_arg);
constexpr uint64_t page_is_present = 1u << 3, page_is_huge = 1u << 6;

// Indices of the whole blocks of [at, at + bytes) with a present page that is not mapped huge, in order, each once;
// nullopt where the kernel has no PAGEMAP_SCAN.
std::optional<std::vector<size_t>> small_blocks(const void* at, size_t bytes) {
  const size_t n_blocks = bytes / huge_page_bytes;
  std::vector<size_t> out;
  if (n_blocks == 0)
    return out;
  const file_descriptor pagemap(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  if (pagemap.get() < 0)
    return std::nullopt;
  const auto begin = reinterpret_cast<uintptr_t>(at);
  const uintptr_t end = begin + n_blocks * huge_page_bytes;
  std::array<page_region, 64> regions{};
  pm_scan_arg arg{};
  arg.size = sizeof arg;
  arg.start = begin;
  arg.end = end;
  arg.vec = reinterpret_cast<uintptr_t>(regions.data());
  arg.vec_len = regions.size();
  // Present and not huge: the huge bit inverted, both required.
  arg.category_inverted = page_is_huge;
  arg.category_mask = page_is_present | page_is_huge;
  arg.return_mask = page_is_present;
  while (arg.start < end) {
    const int n = ::ioctl(pagemap.get(), pagemap_scan, &arg);
    if (n < 0)
      return std::nullopt;
    for (int i = 0; i < n; ++i) {
      const page_region& r = regions[static_cast<size_t>(i)];
      for (size_t b = (r.start - begin) / huge_page_bytes; b * huge_page_bytes + begin < r.end; ++b)
        if (out.empty() || out.back() < b)
          out.push_back(b);
    }
    if (arg.walk_end <= arg.start)
      break;  // no progress: never expected, but never a loop
    arg.start = arg.walk_end;
  }
  return out;
}

}  // namespace

std::optional<size_t> count_small_page_blocks(const void* at, size_t bytes) {
  const auto blocks = small_blocks(at, bytes);
  if (!blocks)
    return std::nullopt;
  return blocks->size();
}

huge_page_reread read_again_in_huge_pages(int fd, void* at, size_t bytes) {
  huge_page_reread r;
  populate_for_reading(at, bytes);
  const auto blocks = small_blocks(at, bytes);
  if (!blocks)
    return r;
  r.supported = true;
  r.small_before = blocks->size();
  if (blocks->empty())
    return r;
  auto* base = static_cast<char*>(at);
  // Runs of consecutive blocks at once: one unmap, one drop and one fault-in each.
  for (size_t i = 0; i < blocks->size();) {
    size_t j = i + 1;
    while (j < blocks->size() && (*blocks)[j] == (*blocks)[j - 1] + 1)
      ++j;
    const size_t offset = (*blocks)[i] * huge_page_bytes, length = (j - i) * huge_page_bytes;
    // Our own mapping of those pages keeps them in the page cache: unmap them first (read-only and private, so
    // nothing of ours is lost), then drop them, then read them back.
    ::madvise(base + offset, length, MADV_DONTNEED);
    ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_DONTNEED);
    populate_for_reading(base + offset, length);
    i = j;
  }
  const auto after = small_blocks(at, bytes);
  r.small_after = after ? after->size() : r.small_before;
  return r;
}

}  // namespace actorllm::util
