// The abort registry.
#include "comm/abort_registry.hpp"

#include <utility>
#include <vector>

namespace actorllm::comm {

abort_registry& abort_registry::process() {
  static abort_registry registry;
  return registry;
}

uint64_t abort_registry::add(abort_function abort) {
  std::unique_lock lock{mutex_};
  const uint64_t key = next_key_++;
  if (aborted_) {
    const std::string reason = reason_;
    lock.unlock();
    if (abort)
      abort(reason);
    return key;
  }
  entries_.emplace(key, std::move(abort));
  return key;
}

void abort_registry::remove(uint64_t key) {
  std::lock_guard lock{mutex_};
  entries_.erase(key);
}

void abort_registry::abort_all(const std::string& reason) {
  std::map<uint64_t, abort_function> entries;
  {
    std::lock_guard lock{mutex_};
    if (!aborted_) {
      aborted_ = true;
      reason_ = reason;
    }
    entries.swap(entries_);
  }
  // Outside the lock: an abort may take a while (NCCL tears down its connections) and must not block add/remove.
  for (auto& [key, abort] : entries)
    if (abort)
      abort(reason);
}

size_t abort_registry::size() const {
  std::lock_guard lock{mutex_};
  return entries_.size();
}

bool abort_registry::aborted() const {
  std::lock_guard lock{mutex_};
  return aborted_;
}

}  // namespace actorllm::comm
