// Request handlers off the HTTP I/O thread. Parsing a request, rendering its chat template, compiling a structured-
// output constraint and tokenizing a long prompt take milliseconds to seconds; on the I/O thread they would stall
// every other connection's stream. A handler_pool runs such handlers on threads of its own: the I/O thread gets a
// channel at once and waits on it as on any other, and once the handler has returned its own channel, everything fed
// to that one (a whole answer, stream chunks, the close) is forwarded in order. A client that hangs up before the
// handler ran skips it; one that hangs up later cancels the handler's channel, as without the pool.
#pragma once

#include "net/http_server.hpp"
#include "net/routes.hpp"

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace actorllm::net {

class handler_pool {
 public:
  /// Starts `threads` threads (at least one), named `name` in logs.
  explicit handler_pool(std::size_t threads, std::string name = "preprocess");
  /// Lets the running handlers finish; the ones still queued are answered 503 without running.
  ~handler_pool();
  handler_pool(const handler_pool&) = delete;
  handler_pool& operator=(const handler_pool&) = delete;

  /// Queues `handler(request)` and returns the channel its answer will arrive on. A handler that throws or returns
  /// no channel gets a 500. Never blocks; thread-safe.
  std::shared_ptr<response_channel> run(http_request request, router::route_handler handler);
  /// `handler` as a route handler that runs on this pool (the request is copied for the pool's thread).
  router::route_handler offload(router::route_handler handler);

 private:
  struct task;
  void work();

  std::string name_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<task>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace actorllm::net
