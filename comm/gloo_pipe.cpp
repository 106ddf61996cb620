// Point-to-point transfers over Gloo's unbound buffers.
#include "comm/gloo_pipe.hpp"

#include "comm/gloo_group_impl.hpp"
#include "util/check.hpp"

#include <gloo/transport/unbound_buffer.h>

#include <fmt/format.h>

namespace actorllm::comm {

namespace {

// Gloo's collectives take slots under prefixes 0x01..0x08 (gloo/types.h) or from Context::nextSlot() (small
// numbers); pipe messages live under a prefix none of them uses.
constexpr uint64_t pipe_slot_prefix = uint64_t{0xA5} << 56;

uint64_t slot_of(uint64_t tag) { return pipe_slot_prefix | tag; }

}  // namespace

struct gloo_pipe::pending_send {
  int peer;
  uint64_t tag;
  std::vector<float> payload;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;  // over payload
};

gloo_pipe::gloo_pipe(std::shared_ptr<gloo_group> group, size_t max_pending_sends)
    : group_(std::move(group)), max_pending_sends_(max_pending_sends) {
  ACTORLLM_CHECK(group_ != nullptr, "gloo_pipe needs a group");
  ACTORLLM_CHECK(max_pending_sends_ >= 1, "gloo_pipe needs room for one send");
}

gloo_pipe::~gloo_pipe() {
  try {
    flush();
  } catch (const std::exception&) {
    // The peer is gone or the group broke; the transfers cannot complete and the error was reported elsewhere.
  }
  // Buffers still posted are withdrawn before their memory goes (Gloo's pairs hold non-owning references).
  pending_.clear();
}

void gloo_pipe::send(int peer_rank, uint64_t tag, const float* data, int64_t n) {
  ACTORLLM_CHECK(peer_rank >= 0 && peer_rank < group_->size() && peer_rank != group_->rank(),
                 "send to a rank outside the group or to itself");
  ACTORLLM_CHECK(tag <= max_tag, "pipe tag above gloo_pipe::max_tag");
  ACTORLLM_CHECK(n >= 0, "negative element count");
  while (pending_.size() >= max_pending_sends_)
    wait_oldest_send();
  auto& state = *group_->impl_;
  auto p = std::make_unique<pending_send>();
  p->peer = peer_rank;
  p->tag = tag;
  p->payload.assign(data, data + n);
  state.guarded(fmt::format("send of {} floats (tag {})", n, tag), peer_rank, [&] {
    p->buffer = state.context->createUnboundBuffer(p->payload.data(), p->payload.size() * sizeof(float));
    p->buffer->send(peer_rank, slot_of(tag));
  });
  pending_.push_back(std::move(p));
}

void gloo_pipe::wait_oldest_send() {
  auto& state = *group_->impl_;
  auto& p = *pending_.front();
  state.guarded(fmt::format("send of {} floats (tag {})", p.payload.size(), p.tag), p.peer, [&] {
    if (!p.buffer->waitSend(group_->timeout()))
      throw comm_error("the send was aborted");
  });
  pending_.pop_front();
}

void gloo_pipe::flush() {
  while (!pending_.empty())
    wait_oldest_send();
}

void gloo_pipe::recv(int peer_rank, uint64_t tag, float* data, int64_t n) {
  ACTORLLM_CHECK(peer_rank >= 0 && peer_rank < group_->size() && peer_rank != group_->rank(),
                 "recv from a rank outside the group or from itself");
  ACTORLLM_CHECK(tag <= max_tag, "pipe tag above gloo_pipe::max_tag");
  ACTORLLM_CHECK(n >= 0, "negative element count");
  auto& state = *group_->impl_;
  state.guarded(fmt::format("recv of {} floats (tag {})", n, tag), peer_rank, [&] {
    auto buffer = state.context->createUnboundBuffer(data, static_cast<size_t>(n) * sizeof(float));
    buffer->recv(peer_rank, slot_of(tag));
    if (!buffer->waitRecv(group_->timeout()))
      throw comm_error("the receive was aborted");
  });
}

}  // namespace actorllm::comm
