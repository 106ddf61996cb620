// The process-wide work counter.
#include "util/work_progress.hpp"

#include <atomic>

namespace actorllm::util {
namespace {
std::atomic<uint64_t> units_done{0};
}  // namespace

void note_work_progress() noexcept { units_done.fetch_add(1, std::memory_order_relaxed); }

uint64_t work_progress() noexcept { return units_done.load(std::memory_order_relaxed); }

}  // namespace actorllm::util
