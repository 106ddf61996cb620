// Point-to-point transfers between the ranks of a gloo_group: a pipeline stage sends its hidden states
// ([n_tokens, n_embd] floats per step) to the next stage. Messages are matched by (peer, tag), so a receiver may
// take them in any order; the tag is the step id.
#pragma once

#include "comm/gloo_group.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace actorllm::comm {

/// Sends and receives float buffers to and from the other ranks of a gloo_group. send() copies the payload and
/// returns at once; the transfer completes when the peer posts the matching recv(). Every wait is bounded by the
/// group's timeout (comm_error after it). Shares its group's one-thread-at-a-time rule; it may share the group with
/// a gloo_collective (their Gloo slots are disjoint).
class gloo_pipe {
 public:
  /// Largest tag: tags map into Gloo's 64-bit slot under an 8-bit prefix of their own.
  static constexpr uint64_t max_tag = (uint64_t{1} << 56) - 1;

  /// At most `max_pending_sends` sends stay in flight; one more waits for the oldest to be received first.
  explicit gloo_pipe(std::shared_ptr<gloo_group> group, size_t max_pending_sends = 64);
  /// Waits (up to the timeout each) for sends still in flight; errors there are dropped, as the peer is gone.
  ~gloo_pipe();
  gloo_pipe(const gloo_pipe&) = delete;
  gloo_pipe& operator=(const gloo_pipe&) = delete;

  /// Queues `n` floats for `peer_rank` under `tag` (<= max_tag, each (peer, tag) once at a time). The data is
  /// copied: the caller may reuse `data` at once. Throws comm_error when waiting out a full queue fails.
  void send(int peer_rank, uint64_t tag, const float* data, int64_t n);
  /// Receives the `n` floats `peer_rank` sent under `tag` into `data`, waiting up to the group's timeout. The
  /// receiver knows `n` from the plan; it must equal the sent count. Throws comm_error on timeout or a lost peer.
  void recv(int peer_rank, uint64_t tag, float* data, int64_t n);
  /// Waits until every queued send has been received. Throws comm_error on timeout or a lost peer.
  void flush();
  /// Sends not yet known to be received.
  size_t pending_sends() const { return pending_.size(); }

 private:
  struct pending_send;
  void wait_oldest_send();

  std::shared_ptr<gloo_group> group_;
  size_t max_pending_sends_;
  std::deque<std::unique_ptr<pending_send>> pending_;
};

}  // namespace actorllm::comm
