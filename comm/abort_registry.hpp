// The failure path's reach into the data plane: the abort functions of the device communicators (NCCL) a process
// holds. When the engine declares a peer dead (a worker sees its replica's registry go away, which is how a failed
// replica is torn down), everything here is aborted, so that no surviving rank stays inside a collective whose peer
// is gone. Plain C++: the worker wires it to its down message, tests drive it directly.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace actorllm::comm {

/// A thread-safe set of abort functions.
class abort_registry {
 public:
  using abort_function = std::function<void(const std::string&)>;

  /// The process's registry (what the worker process aborts when its engine is gone).
  static abort_registry& process();

  /// Adds `abort` (called at most once, from the thread that calls abort_all) and returns its key for remove().
  /// After abort_all, a new entry is aborted at once with the same reason: the process is going down.
  uint64_t add(abort_function abort);
  /// Drops the entry under `key` (a communicator destroyed in order); unknown keys are ignored.
  void remove(uint64_t key);
  /// Calls every entry once with `reason` and empties the registry. Later calls add nothing new to the reason.
  void abort_all(const std::string& reason);
  /// Entries not yet aborted or removed.
  size_t size() const;
  /// Whether abort_all has been called.
  bool aborted() const;

 private:
  mutable std::mutex mutex_;
  std::map<uint64_t, abort_function> entries_;
  uint64_t next_key_ = 1;
  bool aborted_ = false;
  std::string reason_;
};

}  // namespace actorllm::comm
