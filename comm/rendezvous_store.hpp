// The key/value store through which the ranks of a process group find each other (each publishes its transport
// address, then reads its peers'). Our own interface so the transport (Gloo) stays out of the control plane: the
// multi-process executor implements it over CAF messages; memory_store serves threads of one process and tests.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace actorllm::comm {

/// A write-once-per-key key/value store shared by every rank of one or more groups. Implementations must be safe
/// to call from several threads at once. Keys are printable ASCII; values are opaque bytes (a few hundred per
/// rank). Groups sharing a store keep apart by key prefix (gloo_group uses "<group name>/"), so a group name is
/// used once per store: a re-created group takes a new name (add an epoch), never reads a dead group's keys.
class rendezvous_store {
 public:
  virtual ~rendezvous_store() = default;

  /// Publishes `value` under `key` and wakes every get() waiting for it. Setting a key again replaces the value.
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;

  /// The value under `key`, waiting up to `timeout` for some rank to set it. Throws comm_error naming the key and
  /// the time waited when it is still missing after that.
  virtual std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

}  // namespace actorllm::comm
