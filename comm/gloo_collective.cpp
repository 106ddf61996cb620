// TP collectives over Gloo.
#include "comm/gloo_collective.hpp"

#include "comm/gloo_group_impl.hpp"
#include "util/check.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/transport/unbound_buffer.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>

namespace actorllm::comm {

gloo_collective::gloo_collective(std::shared_ptr<gloo_group> group) : group_(std::move(group)) {
  ACTORLLM_CHECK(group_ != nullptr, "gloo_collective needs a group");
}

namespace {
constexpr size_t bcube_max_bytes = size_t{256} << 10;

// The all-to-all's messages live under a slot prefix of their own, like gloo_pipe's (0xA5): Gloo's collectives take
// prefixes 0x01..0x08 or small numbers. Counts and rows take two slots; between two ranks, messages on one slot
// match receives in the order both posted them, so successive calls need no fresh slot.
constexpr uint64_t all_to_all_counts_slot = uint64_t{0xA6} << 56;
constexpr uint64_t all_to_all_rows_slot = all_to_all_counts_slot | 1;

/// Waits for `n` completions of `wait` (a buffer's waitSend or waitRecv) before `deadline`.
template <class Wait>
void wait_all(int n, std::chrono::steady_clock::time_point deadline, Wait&& wait) {
  for (int i = 0; i < n; ++i) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (!wait(std::max(left, std::chrono::milliseconds{1})))
      throw comm_error("the transfer was aborted");
  }
}
}  // namespace

void gloo_collective::all_reduce_sum(float* data, int64_t n) {
  ACTORLLM_CHECK(n >= 0, "negative element count");
  if (n == 0 || size() == 1)
    return;
  auto& state = *group_->impl_;
  state.guarded(fmt::format("all_reduce_sum of {} floats", n), -1, [&] {
    gloo::AllreduceOptions opts{state.context};
    opts.setOutput(data, static_cast<size_t>(n));  // no input: in place
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTimeout(group_->timeout());
    // Decode-sized buffers (a token's hidden state is a few KiB) are latency-bound: BCube finishes in log2(size)
    // exchanges where the ring takes 2(size - 1) steps. Large buffers keep the bandwidth-optimal ring.
    if (static_cast<size_t>(n) * sizeof(float) < bcube_max_bytes)
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
    gloo::allreduce(opts);
  });
}

void gloo_collective::all_gather(const float* in, int64_t n_per_rank, float* out) {
  ACTORLLM_CHECK(n_per_rank >= 0, "negative element count");
  float* own = out + static_cast<ptrdiff_t>(rank()) * n_per_rank;
  if (in != own)
    std::memmove(own, in, static_cast<size_t>(n_per_rank) * sizeof(float));
  if (n_per_rank == 0 || size() == 1)
    return;
  auto& state = *group_->impl_;
  state.guarded(fmt::format("all_gather of {} floats per rank", n_per_rank), -1, [&] {
    gloo::AllgatherOptions opts{state.context};
    opts.setOutput(out, static_cast<size_t>(n_per_rank * size()));  // no input: this rank's slice is in place
    opts.setTimeout(group_->timeout());
    gloo::allgather(opts);
  });
}

std::vector<int64_t> gloo_collective::all_to_all_rows(const float* send, std::span<const int64_t> send_rows,
                                                      int64_t width, std::vector<float>& recv) {
  const int n = size();
  const int me = rank();
  const auto un = static_cast<size_t>(n);
  const int64_t n_send = rows_to_send(send_rows, width);
  if (n == 1)
    return all_to_all_alone(send, n_send, width, recv);
  std::vector<int64_t> from(un, 0);
  auto& state = *group_->impl_;
  const auto deadline = std::chrono::steady_clock::now() + group_->timeout();
  const auto row_bytes = static_cast<size_t>(width) * sizeof(float);

  // Step 1: one count to and from each peer.
  state.guarded("all_to_all_rows: the row counts", -1, [&] {
    std::vector<int64_t> told(send_rows.begin(), send_rows.end());  // Gloo's buffers take non-const memory
    auto out = state.context->createUnboundBuffer(told.data(), un * sizeof(int64_t));
    auto in = state.context->createUnboundBuffer(from.data(), un * sizeof(int64_t));
    for (int peer = 0; peer < n; ++peer) {
      if (peer == me)
        continue;
      const size_t at = static_cast<size_t>(peer) * sizeof(int64_t);
      in->recv(peer, all_to_all_counts_slot, at, sizeof(int64_t));
      out->send(peer, all_to_all_counts_slot, at, sizeof(int64_t));
    }
    wait_all(n - 1, deadline, [&](std::chrono::milliseconds left) { return in->waitRecv(left); });
    wait_all(n - 1, deadline, [&](std::chrono::milliseconds left) { return out->waitSend(left); });
  });
  from[static_cast<size_t>(me)] = send_rows[static_cast<size_t>(me)];
  int64_t n_recv = 0;
  for (size_t src = 0; src < un; ++src) {
    if (from[src] < 0)
      state.fail("all_to_all_rows", static_cast<int>(src), "it sent a negative row count");
    n_recv += from[src];
  }
  recv.resize(static_cast<size_t>(n_recv * width));

  // Step 2: the rows, each run straight from `send` to its place in `recv`; no message where there is nothing.
  std::vector<size_t> send_at(un, 0), recv_at(un, 0);  // byte offsets of each peer's run
  for (size_t p = 1; p < un; ++p) {
    send_at[p] = send_at[p - 1] + static_cast<size_t>(send_rows[p - 1]) * row_bytes;
    recv_at[p] = recv_at[p - 1] + static_cast<size_t>(from[p - 1]) * row_bytes;
  }
  const auto mine = static_cast<size_t>(me);
  if (from[mine] > 0)
    std::memcpy(reinterpret_cast<char*>(recv.data()) + recv_at[mine],
                reinterpret_cast<const char*>(send) + send_at[mine], static_cast<size_t>(from[mine]) * row_bytes);
  state.guarded(fmt::format("all_to_all_rows of {} rows out, {} in, {} floats each", n_send, n_recv, width), -1, [&] {
    // Gloo only reads a buffer it sends from: `send` stays unmodified.
    auto out = n_send > 0 ? state.context->createUnboundBuffer(const_cast<float*>(send),
                                                               static_cast<size_t>(n_send) * row_bytes)
                          : nullptr;
    auto in =
        n_recv > 0 ? state.context->createUnboundBuffer(recv.data(), static_cast<size_t>(n_recv) * row_bytes) : nullptr;
    int n_out = 0, n_in = 0;
    for (int peer = 0; peer < n; ++peer) {
      const auto p = static_cast<size_t>(peer);
      if (peer == me)
        continue;
      if (from[p] > 0) {
        in->recv(peer, all_to_all_rows_slot, recv_at[p], static_cast<size_t>(from[p]) * row_bytes);
        ++n_in;
      }
      if (send_rows[p] > 0) {
        out->send(peer, all_to_all_rows_slot, send_at[p], static_cast<size_t>(send_rows[p]) * row_bytes);
        ++n_out;
      }
    }
    wait_all(n_in, deadline, [&](std::chrono::milliseconds left) { return in->waitRecv(left); });
    wait_all(n_out, deadline, [&](std::chrono::milliseconds left) { return out->waitSend(left); });
  });
  count_all_to_all(n_send - send_rows[mine], n_recv - from[mine], width);
  return from;
}

}  // namespace actorllm::comm
