// Request handlers off the HTTP I/O thread. Parsing a request, rendering its chat template, compiling a structured-
// output constraint and tokenizing a long prompt take milliseconds to seconds; on the I/O thread they would stall
// every other connection's stream. A handler_pool runs such handlers on threads of its own: the I/O thread gets a
// channel at once and waits on it as on any other, and once the handler has returned its own channel, everything fed
// to that one (a whole answer, stream chunks, the close) is forwarded in order. A client that hangs up before the
// handler ran skips it; one that hangs up while it runs raises the flag the handler polls (cancelled()) and cancels
// the channel it returns, as without the pool.
//
// Stopping is bounded: stop(deadline) waits for running handlers only until the deadline, and leaves the ones that
// have not returned by then running on threads nobody joins (the pool's own state is shared with them, so they touch
// nothing freed). What such a handler uses beyond the pool must then outlive it: `actorllm serve` ends the process
// rather than destroy the service and the engine under it (apps/cmd_serve.cpp).
#pragma once

#include "net/http_server.hpp"
#include "net/routes.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace actorllm::net {

class handler_pool {
 public:
  /// Starts `threads` threads (at least one), named `name` in logs.
  explicit handler_pool(std::size_t threads, std::string name = "preprocess");
  /// stop() without a deadline, unless stop() ran already: the ones still queued are answered 503 without running,
  /// the running ones are asked to stop (cancelled()) and waited for.
  ~handler_pool();
  handler_pool(const handler_pool&) = delete;
  handler_pool& operator=(const handler_pool&) = delete;

  /// Queues `handler(request)` and returns the channel its answer will arrive on. A handler that throws or returns
  /// no channel gets a 500. Never blocks; thread-safe. After stop: a 503 at once.
  std::shared_ptr<response_channel> run(http_request request, router::route_handler handler);
  /// `handler` as a route handler that runs on this pool (the request is copied for the pool's thread).
  router::route_handler offload(router::route_handler handler);

  /// Stops the pool: handlers still queued are answered 503 without running, the running ones see cancelled() turn
  /// true, and they have until `deadline` to return. True when every thread has ended (they are joined); false when
  /// some handler still runs then: its thread is detached and left to finish (or to end with the process). Call
  /// once, not from a pool thread.
  bool stop(std::chrono::steady_clock::time_point deadline);

  /// For a handler running on a pool thread: whether its request was cancelled (the client hung up, or the pool is
  /// stopping). A handler polls it between costly steps (between the prompts of a batch, before it submits work to
  /// the engine) and returns early; its answer then goes nowhere, or is the 503 of a server that is shutting down.
  /// False on any other thread.
  static bool cancelled();
  /// The same flag, for work a handler hands to another thread (null on any thread but a pool thread's).
  static std::shared_ptr<const std::atomic<bool>> cancellation();

 private:
  struct task;
  struct shared;
  static void work(const std::shared_ptr<shared>& state, std::size_t index);
  bool stop_until(const std::chrono::steady_clock::time_point* deadline);

  std::shared_ptr<shared> state_;  // shared with the threads: a detached one still finds it
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

}  // namespace actorllm::net
