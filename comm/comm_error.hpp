// The one exception type of the data plane between processes. Collectives run deep inside a forward pass, where
// an error cannot travel as a value; the shard that drives the pass catches comm_error at its boundary and turns
// it into a caf::error for the control plane.
#pragma once

#include <stdexcept>
#include <string>

namespace actorllm::comm {

/// A failed rendezvous, connect, collective or point-to-point transfer. The message names the group, this rank,
/// the peer when one is known, and what failed or timed out. A group that threw one is broken: every later
/// operation on it throws too.
class comm_error : public std::runtime_error {
 public:
  explicit comm_error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace actorllm::comm
