// Faulting a mapping's pages in one call instead of one trap per page.
#pragma once

#include <cstddef>

namespace actorllm::util {

/// Maps the pages of [p, p + bytes) for reading in one call (MADV_POPULATE_READ) where the kernel can (true); a no-op
/// where it cannot (false: before Linux 5.14, or a range that is not all mapped). A weight read first through a file
/// mapping faults once per 64 KiB otherwise: 0.9 s against 0.1 s for the 2.2 GB of a 1.1B model on a 2-core VM, where
/// each fault costs a trip through the hypervisor.
bool populate_for_reading(const void* p, size_t bytes);

}  // namespace actorllm::util
