// A minimal C++20 coroutine task and sync_wait, so a host program can co_await actorllm's token streams without
// bringing its own coroutine library. Any other coroutine type can co_await a stream too.
#pragma once

#include <condition_variable>
#include <coroutine>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

namespace actorllm {

namespace detail {

/// A queue of coroutines to resume on the thread that runs it: sync_wait's event loop. An awaitable that finds a
/// current loop when it suspends resumes its coroutine there; otherwise it resumes on the thread that completes it.
class run_loop {
 public:
  /// Queues `h` to be resumed by run(); callable from any thread.
  void post(std::coroutine_handle<> h);
  /// Resumes queued coroutines until finish() was called.
  void run();
  /// Makes run() return once the current resumption is over; called on the loop's thread.
  void finish();
  /// The loop that the calling thread is running (or about to run), or nullptr.
  static run_loop* current() noexcept;

  /// Makes `loop` the calling thread's current loop for this object's lifetime.
  class scope {
   public:
    explicit scope(run_loop& loop);
    ~scope();
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;

   private:
    run_loop* previous_;
  };

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::coroutine_handle<>> queue_;
  bool done_ = false;
};

/// Resumes `h` on `loop` when there is one, else right here.
inline void resume_on(std::coroutine_handle<> h, run_loop* loop) {
  if (loop != nullptr)
    loop->post(h);
  else
    h.resume();
}

/// A finished task hands control to whoever awaited it (symmetric transfer), or returns to its resumer.
struct task_final_awaiter {
  bool await_ready() noexcept { return false; }
  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> h) noexcept {
    auto next = h.promise().continuation;
    return next ? next : std::noop_coroutine();
  }
  void await_resume() noexcept {}
};

struct task_promise_base {
  std::coroutine_handle<> continuation;
  std::exception_ptr error;

  std::suspend_always initial_suspend() noexcept { return {}; }
  task_final_awaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }
};

template <class T>
struct task_promise_value : task_promise_base {
  std::optional<T> value;
  template <class U = T>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
  T take() {
    if (error)
      std::rethrow_exception(error);
    return std::move(*value);
  }
};

template <>
struct task_promise_value<void> : task_promise_base {
  void return_void() noexcept {}
  void take() {
    if (error)
      std::rethrow_exception(error);
  }
};

/// The coroutine sync_wait drives: it starts suspended and ends its loop when it finishes.
struct sync_wait_driver {
  struct promise_type {
    run_loop* loop = nullptr;
    sync_wait_driver get_return_object() { return {std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct finisher {
        bool await_ready() noexcept { return false; }
        void await_suspend(std::coroutine_handle<promise_type> h) noexcept { h.promise().loop->finish(); }
        void await_resume() noexcept {}
      };
      return finisher{};
    }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // the driver's body catches everything
  };
  std::coroutine_handle<promise_type> handle;
};

}  // namespace detail

/// A lazily started coroutine that produces a T (or void): it runs when awaited, and resumes its awaiter when it
/// finishes (symmetric transfer, so long chains do not grow the stack). Exceptions propagate to the awaiter.
template <class T = void>
class [[nodiscard]] task {
 public:
  /// The coroutine's promise.
  struct promise_type : detail::task_promise_value<T> {
    task get_return_object() { return task{std::coroutine_handle<promise_type>::from_promise(*this)}; }
  };

  task(task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      if (handle_)
        handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() {
    if (handle_)
      handle_.destroy();
  }

  /// Runs the task to completion inside the awaiting coroutine and yields its result.
  auto operator co_await() noexcept {
    struct awaiter {
      std::coroutine_handle<promise_type> handle;
      bool await_ready() noexcept { return !handle || handle.done(); }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
        handle.promise().continuation = awaiting;
        return handle;
      }
      T await_resume() { return handle.promise().take(); }
    };
    return awaiter{handle_};
  }

 private:
  explicit task(std::coroutine_handle<promise_type> h) : handle_(h) {}
  std::coroutine_handle<promise_type> handle_;
};

/// Runs `t` on the calling thread until it finishes and returns its result (or rethrows its exception). Streams
/// awaited inside resume on this thread, so the whole task runs here.
template <class T>
T sync_wait(task<T> t) {
  detail::run_loop loop;
  detail::run_loop::scope in_loop{loop};
  std::exception_ptr error;
  if constexpr (std::is_void_v<T>) {
    auto driver = [](task<T>& inner, std::exception_ptr& err) -> detail::sync_wait_driver {
      try {
        co_await inner;
      } catch (...) {
        err = std::current_exception();
      }
    }(t, error);
    driver.handle.promise().loop = &loop;
    loop.post(driver.handle);
    loop.run();
    driver.handle.destroy();
    if (error)
      std::rethrow_exception(error);
  } else {
    std::optional<T> result;
    auto driver = [](task<T>& inner, std::optional<T>& out, std::exception_ptr& err) -> detail::sync_wait_driver {
      try {
        out.emplace(co_await inner);
      } catch (...) {
        err = std::current_exception();
      }
    }(t, result, error);
    driver.handle.promise().loop = &loop;
    loop.post(driver.handle);
    loop.run();
    driver.handle.destroy();
    if (error)
      std::rethrow_exception(error);
    return std::move(*result);
  }
}

}  // namespace actorllm
