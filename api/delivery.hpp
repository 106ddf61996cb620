// Delivery: how a request's news reaches its caller. The engines of every replica send their output batches to
// one detached actor (the delivery thread), which hands them to the replica set; each request's channel then gets
// its deltas, its output or its error: a coroutine stream, a set of callbacks, or a slot of a generate() batch.
#pragma once

#include "actorllm/llm.hpp"
#include "actorllm/proto/sinks.hpp"
#include "api/request_book.hpp"

#include <caf/fwd.hpp>

#include <condition_variable>
#include <coroutine>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace actorllm::detail {

struct llm_impl;

/// A stream's shared state: a queue of deltas, the final output, and the coroutine waiting for them.
struct stream_state final : channel {
  uint64_t request_id = 0;
  std::weak_ptr<llm_impl> llm;
  mutable std::mutex mutex;
  std::condition_variable cv;
  std::deque<stream_delta> deltas;
  std::optional<request_output> output;
  std::optional<error> failure;
  bool done = false;
  std::coroutine_handle<> waiter;
  run_loop* waiter_loop = nullptr;

  void on_delta(stream_delta&& delta) override;
  void on_output(request_output&& out) override;
  void on_error(error&& err) override;
  bool ready() const { return !deltas.empty() || done; }
  /// The next delta, nullopt at the end; throws the request's error.
  std::optional<stream_delta> pop();

 private:
  void wake(std::unique_lock<std::mutex>& lock);
};

/// LLM::submit's channel: the caller's callbacks.
struct callback_channel final : channel {
  stream_callbacks callbacks;
  void on_delta(stream_delta&& delta) override;
  void on_output(request_output&& out) override;
  void on_error(error&& err) override;
};

/// generate()'s fan-in: one slot per prompt.
struct batch_state {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::optional<request_output>> outputs;
  std::optional<error> failure;
  size_t remaining = 0;
};

struct batch_channel final : channel {
  std::shared_ptr<batch_state> batch;
  size_t slot = 0;
  void on_delta(stream_delta&&) override {}
  void on_output(request_output&& out) override;
  void on_error(error&& err) override;
};

/// Hands a request_book's deliveries to their channels (on the delivery thread, with no lock held).
void deliver(request_book::deliveries& d);

/// Spawns the delivery actor (detached: its own thread), which calls `on_batch` for every batch an engine sends.
proto::output_sink spawn_delivery(caf::actor_system& sys, std::function<void(proto::output_batch&)> on_batch);

}  // namespace actorllm::detail
