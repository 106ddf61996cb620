// sync_wait's event loop.
#include "actorllm/task.hpp"

namespace actorllm::detail {

namespace {
thread_local run_loop* current_loop = nullptr;
}  // namespace

void run_loop::post(std::coroutine_handle<> h) {
  {
    std::lock_guard lock{mutex_};
    queue_.push_back(h);
  }
  cv_.notify_one();
}

void run_loop::run() {
  std::unique_lock lock{mutex_};
  while (!done_) {
    cv_.wait(lock, [this] { return done_ || !queue_.empty(); });
    while (!queue_.empty() && !done_) {
      auto h = queue_.front();
      queue_.pop_front();
      lock.unlock();
      h.resume();
      lock.lock();
    }
  }
}

void run_loop::finish() {
  std::lock_guard lock{mutex_};
  done_ = true;
}

run_loop* run_loop::current() noexcept { return current_loop; }

run_loop::scope::scope(run_loop& loop) : previous_(current_loop) { current_loop = &loop; }

run_loop::scope::~scope() { current_loop = previous_; }

}  // namespace actorllm::detail
