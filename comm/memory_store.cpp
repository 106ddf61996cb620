// The in-process rendezvous store.
#include "comm/memory_store.hpp"

#include "comm/comm_error.hpp"

#include <fmt/format.h>

namespace actorllm::comm {

void memory_store::set(const std::string& key, const std::vector<char>& value) {
  {
    std::lock_guard lock{mutex_};
    values_[key] = value;
  }
  changed_.notify_all();
}

std::vector<char> memory_store::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock lock{mutex_};
  auto it = values_.end();
  const bool found = changed_.wait_for(lock, timeout, [&] {
    it = values_.find(key);
    return it != values_.end();
  });
  if (!found)
    throw comm_error(fmt::format("rendezvous: key '{}' still not set after waiting {} ms", key, timeout.count()));
  return it->second;
}

}  // namespace actorllm::comm
