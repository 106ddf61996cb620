#include "net/handler_pool.hpp"

#include "util/log.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <utility>

namespace actorllm::net {

/// One queued handler, and once it has run, the link from its channel (inner) to the connection's (outer).
struct handler_pool::task {
  http_request request;
  router::route_handler handler;
  std::shared_ptr<response_channel> outer = std::make_shared<response_channel>();
  /// What cancelled() reads while the handler runs: set when the client hangs up or the pool stops.
  std::shared_ptr<std::atomic<bool>> cancel_flag = std::make_shared<std::atomic<bool>>(false);

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

  /// The client is gone: a handler that has not run never will; a running one sees cancelled(), and the channel it
  /// returns is cancelled (what it submitted is aborted); a request already linked is cancelled (aborted).
  void cancel() {
    cancel_flag->store(true);
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

/// What the pool's threads share with it, and keep after it is gone (a thread stop() left running).
struct handler_pool::shared {
  explicit shared(std::string n, std::size_t threads) : name{std::move(n)}, running(threads) {}

  const std::string name;
  /// A hidden test hook (no flag): ACTORLLM_TEST_HANDLER_DELAY_MS stalls every handler this long before it runs,
  /// without polling cancelled(), as a tokenizer or template that takes minutes would. The shutdown tests use it to
  /// keep the threads busy; every real request slow enough for that costs a gigabyte or more.
  std::chrono::milliseconds test_delay{0};
  std::mutex mutex;
  std::condition_variable wake;   // a task is queued, or the pool stops
  std::condition_variable ended;  // a thread ended
  std::deque<std::shared_ptr<task>> tasks;
  std::vector<std::shared_ptr<task>> running;  // per thread: the task whose handler it runs now
  std::size_t live = 0;                        // threads that have not ended
  bool stopping = false;
};

namespace {

/// The task the calling pool thread runs a handler for (null elsewhere): what cancelled() reads.
thread_local std::shared_ptr<std::atomic<bool>> current_cancel_flag;

}  // namespace

handler_pool::handler_pool(std::size_t threads, std::string name) {
  threads = std::max<std::size_t>(threads, 1);
  state_ = std::make_shared<shared>(std::move(name), threads);
  state_->live = threads;
  if (const char* env = std::getenv("ACTORLLM_TEST_HANDLER_DELAY_MS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long ms = std::strtol(env, &end, 10);
    if (end != nullptr && *end == '\0' && ms > 0)
      state_->test_delay = std::chrono::milliseconds{ms};
    else
      log::warning(state_->name, "ignoring ACTORLLM_TEST_HANDLER_DELAY_MS='{}' (want whole milliseconds > 0)", env);
  }
  threads_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i)
    threads_.emplace_back([state = state_, i] { work(state, i); });
}

handler_pool::~handler_pool() {
  if (!stopped_)
    stop_until(nullptr);
}

bool handler_pool::stop(std::chrono::steady_clock::time_point deadline) { return stop_until(&deadline); }

bool handler_pool::stop_until(const std::chrono::steady_clock::time_point* deadline) {
  if (stopped_)
    return threads_.empty();
  stopped_ = true;
  std::deque<std::shared_ptr<task>> left;
  {
    std::lock_guard lock{state_->mutex};
    state_->stopping = true;
    left.swap(state_->tasks);
    for (const auto& t : state_->running)
      if (t)
        t->cancel_flag->store(true);
  }
  // Answered before the wait: their clients need not wait for the running handlers.
  for (const auto& t : left)
    t->outer->respond(error_response(openai::api_error::unavailable("the server is shutting down")));
  state_->wake.notify_all();
  bool all_ended = true;
  {
    std::unique_lock lock{state_->mutex};
    const auto done = [this] { return state_->live == 0; };
    if (deadline == nullptr)
      state_->ended.wait(lock, done);
    else
      all_ended = state_->ended.wait_until(lock, *deadline, done);
  }
  if (all_ended) {
    for (auto& t : threads_)
      t.join();
  } else {
    log::warning(state_->name,
                 "{} handler(s) still running at the shutdown deadline: their threads are left to finish unjoined",
                 state_->live);
    for (auto& t : threads_)
      t.detach();
  }
  threads_.clear();
  return all_ended;
}

bool handler_pool::cancelled() { return current_cancel_flag && current_cancel_flag->load(); }

std::shared_ptr<const std::atomic<bool>> handler_pool::cancellation() { return current_cancel_flag; }

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
    std::lock_guard lock{state_->mutex};
    if (state_->stopping) {
      outer->respond(error_response(openai::api_error::unavailable("the server is shutting down")));
      return outer;
    }
    state_->tasks.push_back(std::move(t));
  }
  state_->wake.notify_one();
  return outer;
}

router::route_handler handler_pool::offload(router::route_handler handler) {
  return [this, handler = std::move(handler)](const http_request& request) { return run(request, handler); };
}

void handler_pool::work(const std::shared_ptr<shared>& state, std::size_t index) {
  ::pthread_setname_np(::pthread_self(), state->name.substr(0, 15).c_str());
  for (;;) {
    std::shared_ptr<task> t;
    {
      std::unique_lock lock{state->mutex};
      state->wake.wait(lock, [&] { return state->stopping || !state->tasks.empty(); });
      if (state->stopping)
        break;
      t = std::move(state->tasks.front());
      state->tasks.pop_front();
      state->running[index] = t;
    }
    {
      std::lock_guard lock{t->mutex};
      if (t->cancelled) {
        std::lock_guard state_lock{state->mutex};
        state->running[index].reset();
        continue;  // the client hung up while it waited
      }
    }
    current_cancel_flag = t->cancel_flag;
    if (state->test_delay.count() > 0)
      std::this_thread::sleep_for(state->test_delay);
    std::shared_ptr<response_channel> ch;
    try {
      ch = t->handler(t->request);
    } catch (const std::exception& e) {
      log::error(state->name, "handler failed: {}", e.what());
    } catch (...) {
      log::error(state->name, "handler failed");
    }
    current_cancel_flag.reset();
    {
      std::lock_guard lock{state->mutex};
      state->running[index].reset();
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
  {
    std::lock_guard lock{state->mutex};
    --state->live;
  }
  state->ended.notify_all();
}

}  // namespace actorllm::net
