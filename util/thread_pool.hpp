// A fork-join thread pool for the CPU kernels. One parallel_for per kernel call (about ten per layer per decode
// step), so dispatch latency matters more than generality: workers spin briefly on a generation counter before
// they go to sleep, and the calling thread runs the first chunk itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace actorllm {

/// A fixed set of worker threads that run one parallel_for at a time.
///
/// Nesting: a parallel_for issued from inside a running parallel_for of the same pool (from any of its threads)
/// runs serially on the calling thread, so nested kernels are safe and never deadlock. Calls from different
/// outside threads are serialised: one runs while the others wait for it.
class thread_pool {
 public:
  /// `n_threads` workers in total, including the thread that calls parallel_for; must be >= 1.
  explicit thread_pool(int n_threads);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  /// Number of threads that run chunks, including the caller.
  int size() const { return n_threads_; }

  /// Splits [0, n) into min(n, size()) contiguous chunks of near-equal length, runs fn(begin, end) on each (the
  /// caller runs the first) and returns when all have run. An exception thrown by fn is rethrown here after
  /// every chunk has finished (the first one wins).
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  /// Like parallel_for but hands out chunks of `grain` indices on demand, for work items of uneven cost.
  void parallel_for_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

  /// Process-wide pool sized by ACTORLLM_NUM_THREADS, else std::thread::hardware_concurrency().
  static thread_pool& global();

 private:
  void worker_main(int index);
  void run_chunk(int index) noexcept;
  bool inside_this_pool() const;

  int n_threads_;
  std::vector<std::thread> workers_;

  // The current job, written by the dispatcher before it bumps generation_ and read by workers after they see
  // the new generation; stable until every worker has acknowledged (pending_ == 0).
  const std::function<void(int64_t, int64_t)>* job_fn_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  std::exception_ptr job_error_;
  std::mutex error_mutex_;

  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};

  // Sleeping (after the spin budget): workers wait on wake_cv_, the dispatcher on done_cv_. The sleeper counts
  // let the common all-spinning case skip the mutex and the notify.
  std::mutex sleep_mutex_;
  std::condition_variable wake_cv_;
  std::condition_variable done_cv_;
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> dispatcher_sleeping_{false};

  std::mutex dispatch_mutex_;  // one parallel_for at a time from outside threads
};

}  // namespace actorllm
