// A read-only file mapping read in 2 MiB pages: finding the blocks the kernel maps in 4 KiB pages, and reading them
// again so that they come back whole.
//
// A file mapped with MADV_HUGEPAGE gets one 2 MiB page-table entry per block only where the page cache holds that
// block in one huge folio. A fault that reads the file creates such folios; read(2), readahead of a plain mapping, or a
// writer that filled the file in small pieces leaves small ones, which stay until the kernel drops them. A decode step
// that streams packed weights from such blocks reads about 5% slower (bench_cpu_decode, TinyLlama shape, 2-vCPU Zen 5
// VM: the weights mapped from the packed-weight cache with 55-70% of each entry in huge pages, against the same run
// with its own huge pages), so the cache re-reads the small blocks when it maps an entry.
#pragma once

#include <cstddef>
#include <optional>

namespace actorllm::util {

/// The size of a block the kernel can map with one page-table entry (x86-64 and arm64 with 4 KiB pages).
inline constexpr size_t huge_page_bytes = size_t{2} << 20;

/// How many whole 2 MiB blocks of [at, at + bytes) hold a present page mapped with a small page-table entry (at must be
/// 2 MiB-aligned; a partial block at the end is not counted: it cannot be mapped whole). nullopt where the kernel
/// cannot tell: the PAGEMAP_SCAN ioctl of /proc/self/pagemap is Linux 6.7's.
std::optional<size_t> count_small_page_blocks(const void* at, size_t bytes);

/// What read_again_in_huge_pages did.
struct huge_page_reread {
  bool supported = false;   ///< the kernel can tell small pages from huge ones (count_small_page_blocks)
  size_t small_before = 0;  ///< blocks in small pages when it started
  size_t small_after = 0;   ///< ... when it finished (a block the page cache could not drop stays small)
};

/// Maps every page of `at` (a read-only private mapping of `fd` from offset 0, 2 MiB-aligned, `bytes` long, advised
/// MADV_HUGEPAGE) and gives each block found in small pages a second chance: its pages are unmapped, dropped from the
/// page cache (only clean ones that no other process maps are: those stay as they are), and faulted in again, which
/// reads the block from the file into one huge folio where memory allows. The bytes mapped are the file's bytes either
/// way. Nothing is done where the kernel cannot tell (supported false).
huge_page_reread read_again_in_huge_pages(int fd, void* at, size_t bytes);

}  // namespace actorllm::util
