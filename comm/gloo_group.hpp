// One process group of the data plane between processes: `size` ranks, one per process (or thread), fully
// connected over Gloo's TCP transport after a rendezvous through a rendezvous_store. gloo_collective (TP
// all-reduce / all-gather) and gloo_pipe (pipeline activations) run over it. Gloo's types stay in the .cpp files.
#pragma once

#include "comm/rendezvous_store.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace actorllm::comm {

/// How a gloo_group binds and how long it waits.
struct gloo_group_options {
  /// The local address the TCP transport binds to and advertises to peers (an IP or a host name); pass the host's
  /// ACTORLLM_HOST_IP when the group spans machines.
  std::string host = "127.0.0.1";
  /// Bound on the rendezvous, on connecting to each peer, and on every later operation. A rank that never joins
  /// or stops answering makes the others throw comm_error after this long instead of hanging.
  std::chrono::milliseconds timeout{30'000};
};

/// This rank's membership of one Gloo process group. The constructor rendezvouses and connects to every peer (it
/// blocks until all `size` ranks have joined, or throws comm_error after the timeout); the store is used only
/// inside the constructor. Operations on one group must not run concurrently from several threads: one thread
/// drives a group, like one rank of a shared_memory_collective. Destroying the group closes its connections.
class gloo_group {
 public:
  /// Joins group `name` (unique per store: it prefixes the rendezvous keys) as `rank` of `size`.
  gloo_group(rendezvous_store& store, std::string name, int rank, int size, gloo_group_options options = {});
  ~gloo_group();
  gloo_group(const gloo_group&) = delete;
  gloo_group& operator=(const gloo_group&) = delete;

  /// This rank's index in the group.
  int rank() const { return rank_; }
  /// Number of ranks in the group.
  int size() const { return size_; }
  /// The group's name, as given to the constructor.
  const std::string& name() const { return name_; }
  /// The bound on every operation.
  std::chrono::milliseconds timeout() const { return options_.timeout; }

  /// Gloo's objects, defined in comm/gloo_group_impl.hpp (private to comm/).
  struct impl;

 private:
  friend class gloo_collective;
  friend class gloo_pipe;
  std::string name_;
  int rank_;
  int size_;
  gloo_group_options options_;
  std::unique_ptr<impl> impl_;
};

}  // namespace actorllm::comm
