#include "net/handler_pool.hpp"

#include "util/log.hpp"

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <utility>

namespace actorllm::net {

/// One queued handler, and once it has run, the link from its channel (inner) to the connection's (outer).
struct handler_pool::task {
  http_request request;
  router::route_handler handler;
  std::shared_ptr<response_channel> outer = std::make_shared<response_channel>();

  std::mutex mutex;  // guards inner and cancelled; held while forwarding, which keeps the chunks in order
  std::shared_ptr<response_channel> inner;
  bool cancelled = false;

  /// Moves what the handler's channel holds to the connection's. Once it is closed the link is dropped (the inner
  /// channel's waker, which holds this task, is cleared).
  void forward() {
    std::lock_guard lock{mutex};
    if (!inner)
      return;
    response_channel::batch b = inner->take();
    if (b.response) {
      outer->respond(std::move(*b.response));
    } else {
      if (b.stream_started || !b.chunks.empty())
        outer->send_chunk(std::move(b.chunks));
      if (b.closed)
        outer->close();
    }
    if (b.closed) {
      inner->set_waker(nullptr);  // safe from inside the waker: the channel calls a copy of it
      inner.reset();
    }
  }

  /// The client is gone: a handler that has not run never will; a running request is cancelled (aborted).
  void cancel() {
    std::shared_ptr<response_channel> running;
    {
      std::lock_guard lock{mutex};
      cancelled = true;
      running = std::move(inner);
    }
    if (running)
      running->cancel();
  }
};

handler_pool::handler_pool(std::size_t threads, std::string name) : name_{std::move(name)} {
  threads = std::max<std::size_t>(threads, 1);
  threads_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i)
    threads_.emplace_back([this] { work(); });
}

handler_pool::~handler_pool() {
  std::deque<std::shared_ptr<task>> left;
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
    left.swap(tasks_);
  }
  // Answered before the join: their clients need not wait for the running handlers.
  for (const auto& t : left)
    t->outer->respond(error_response(openai::api_error::unavailable("the server is shutting down")));
  wake_.notify_all();
  for (auto& t : threads_)
    t.join();
}

std::shared_ptr<response_channel> handler_pool::run(http_request request, router::route_handler handler) {
  auto t = std::make_shared<task>();
  t->request = std::move(request);
  t->handler = std::move(handler);
  // Set before the connection sees the channel (on_cancel's contract); weak, so a finished task is not kept alive.
  t->outer->on_cancel([weak = std::weak_ptr<task>{t}] {
    if (auto alive = weak.lock())
      alive->cancel();
  });
  std::shared_ptr<response_channel> outer = t->outer;
  {
    std::lock_guard lock{mutex_};
    if (stopping_) {
      outer->respond(error_response(openai::api_error::unavailable("the server is shutting down")));
      return outer;
    }
    tasks_.push_back(std::move(t));
  }
  wake_.notify_one();
  return outer;
}

router::route_handler handler_pool::offload(router::route_handler handler) {
  return [this, handler = std::move(handler)](const http_request& request) { return run(request, handler); };
}

void handler_pool::work() {
  ::pthread_setname_np(::pthread_self(), name_.substr(0, 15).c_str());
  for (;;) {
    std::shared_ptr<task> t;
    {
      std::unique_lock lock{mutex_};
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (stopping_)
        return;
      t = std::move(tasks_.front());
      tasks_.pop_front();
    }
    {
      std::lock_guard lock{t->mutex};
      if (t->cancelled)
        continue;  // the client hung up while it waited
    }
    std::shared_ptr<response_channel> ch;
    try {
      ch = t->handler(t->request);
    } catch (const std::exception& e) {
      log::error(name_, "handler failed: {}", e.what());
    } catch (...) {
      log::error(name_, "handler failed");
    }
    t->request = {};  // the body can be large; the task lives as long as its answer streams
    t->handler = nullptr;
    if (!ch) {
      ch = std::make_shared<response_channel>();
      ch->respond(error_response(openai::api_error::internal("internal error")));
    }
    bool cancelled = false;
    {
      std::lock_guard lock{t->mutex};
      cancelled = t->cancelled;
      if (!cancelled)
        t->inner = ch;
    }
    if (cancelled) {
      ch->cancel();  // it hung up while the handler ran: abort what the handler started
      continue;
    }
    ch->set_waker([t] { t->forward(); });
    t->forward();  // what arrived before the waker was set
  }
}

}  // namespace actorllm::net
