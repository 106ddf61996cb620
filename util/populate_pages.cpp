#include "util/populate_pages.hpp"

#include <sys/mman.h>

#include <cstdint>

namespace actorllm::util {

bool populate_for_reading(const void* p, size_t bytes) {
#ifdef MADV_POPULATE_READ
  constexpr uintptr_t small_page = 4096;  // madvise wants a page-aligned start; the kernel rounds the end up
  const auto begin = reinterpret_cast<uintptr_t>(p) / small_page * small_page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  return bytes == 0 || ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

}  // namespace actorllm::util
