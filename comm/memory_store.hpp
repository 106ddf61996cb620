// The in-process rendezvous store: ranks that are threads of one process (tests, a single-host group) share one.
#pragma once

#include "comm/rendezvous_store.hpp"

#include <condition_variable>
#include <map>
#include <mutex>

namespace actorllm::comm {

/// A rendezvous_store in memory, guarded by a mutex; get() sleeps on a condition variable until the key appears.
class memory_store final : public rendezvous_store {
 public:
  void set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>, std::less<>> values_;
};

}  // namespace actorllm::comm
