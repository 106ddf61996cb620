// An ipc_backend over host memory for the handshake tests: a handle names an allocation in a registry every rank
// (thread) shares; opening returns the same address; every open and close is recorded, so a test can check that no
// rank opens its own handle and that every mapping is closed.
#pragma once

#include "comm/ipc_memory.hpp"

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace actorllm::test {

/// The allocations of every rank of one test.
struct fake_ipc_registry {
  std::mutex mutex;
  std::map<uint64_t, void*> by_id;   // handle id -> address
  std::map<uint64_t, int> exporter;  // handle id -> rank that exported it
  uint64_t next_id = 1;
  int opens = 0;  // by every rank
};

class fake_ipc_backend final : public ipc_backend {
 public:
  fake_ipc_backend(fake_ipc_registry& registry, int rank, int device)
      : registry_(registry), rank_(rank), device_(device) {}

  ipc_handle export_handle(void* base) override {
    std::lock_guard lock{registry_.mutex};
    const uint64_t id = registry_.next_id++;
    registry_.by_id[id] = base;
    registry_.exporter[id] = rank_;
    ipc_handle h;
    std::memcpy(h.bytes.data(), &id, sizeof id);
    return h;
  }
  void* open_handle(const ipc_handle& handle) override {
    if (open_delay.count() > 0)
      std::this_thread::sleep_for(open_delay);  // a slow first mapping, as CUDA's can be
    uint64_t id = 0;
    std::memcpy(&id, handle.bytes.data(), sizeof id);
    std::lock_guard lock{registry_.mutex};
    if (fail_open_of_rank >= 0 && registry_.exporter.at(id) == fail_open_of_rank)
      throw std::runtime_error("fake: refusing to open");
    if (registry_.exporter.at(id) == rank_)
      opened_own = true;
    void* p = registry_.by_id.at(id);
    open.insert(p);
    ++opens;
    ++registry_.opens;
    return p;
  }
  void close_handle(void* mapped) override {
    std::lock_guard lock{registry_.mutex};
    if (open.erase(mapped) == 0)
      closed_unknown = true;
    ++closes;
  }
  int device_id() const override { return device_; }
  int device_index() const override { return 0; }
  bool opens_own_process() const override { return allow_same_process; }

  // What the test inspects (read after the rank's thread has joined).
  std::multiset<void*> open;
  int opens = 0;
  int closes = 0;
  bool opened_own = false;
  bool closed_unknown = false;
  // What the test sets up.
  bool allow_same_process = true;
  int fail_open_of_rank = -1;
  std::chrono::milliseconds open_delay{0};

 private:
  fake_ipc_registry& registry_;
  int rank_;
  int device_;
};

}  // namespace actorllm::test
