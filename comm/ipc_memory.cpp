// The peers' mappings, closed on destruction.
#include "comm/ipc_memory.hpp"

#include "util/check.hpp"

#include <set>

namespace actorllm {

ipc_peer_buffers::ipc_peer_buffers(ipc_backend& backend, int rank, int world_size, size_t data_bytes,
                                   size_t signal_bytes)
    : backend_(backend), rank_(rank), data_bytes_(data_bytes), signal_bytes_(signal_bytes) {
  ACTORLLM_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "ipc_peer_buffers: rank outside the group");
  ranks_.resize(static_cast<size_t>(world_size));
  opened_.resize(static_cast<size_t>(world_size), false);
}

ipc_peer_buffers::~ipc_peer_buffers() {
  // Close in reverse order of opening; a failing close cannot be reported from a destructor and leaves only a
  // mapping the process exit releases.
  for (size_t i = ranks_.size(); i-- > 0;) {
    if (!opened_[i])
      continue;
    try {
      if (ranks_[i].signal != nullptr)
        backend_.close_handle(ranks_[i].signal);
      if (ranks_[i].data != nullptr)
        backend_.close_handle(ranks_[i].data);
    } catch (...) {
    }
  }
}

void ipc_peer_buffers::set_own(const ipc_rank_buffers& own) { ranks_.at(static_cast<size_t>(rank_)) = own; }

void ipc_peer_buffers::set_opened_peer(int peer, const ipc_rank_buffers& mapped) {
  ACTORLLM_CHECK(peer != rank_, "ipc_peer_buffers: a rank never opens its own handles");
  ranks_.at(static_cast<size_t>(peer)) = mapped;
  opened_.at(static_cast<size_t>(peer)) = true;
}

bool ipc_peer_buffers::all_on_one_device() const {
  for (const auto& r : ranks_)
    if (r.device_id != ranks_.front().device_id)
      return false;
  return true;
}

bool ipc_peer_buffers::any_shared_device() const {
  std::set<int> seen;
  for (const auto& r : ranks_)
    if (!seen.insert(r.device_id).second)
      return true;
  return false;
}

}  // namespace actorllm
