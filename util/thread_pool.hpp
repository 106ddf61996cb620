// A fork-join thread pool for the CPU kernels. One parallel_for per kernel call (about ten per layer per decode
// step), so dispatch latency matters more than generality: workers spin briefly on a generation counter before
// they go to sleep, and the calling thread takes chunks itself. Chunks are claimed, not assigned: a thread the OS
// has not scheduled (the cores shared with other work) leaves its chunk to whoever runs, so a kernel waits only for
// chunks already started, not for a whole time slice of a thread that has not begun. parallel_for_takeover goes one
// step further for work that may be computed twice: a grain held by a descheduled thread is computed again by the
// caller, so the call waits for no thread the OS took off its core.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace actorllm {

/// Work for thread_pool::parallel_for_takeover: items computed grain by grain into the computing thread's scratch,
/// then committed to the outputs by the first thread to finish the grain.
///
/// compute() may run twice for a grain, on two threads at once, and may still be running after the call returned
/// (on a thread that was descheduled): it must read only memory this object owns or keeps alive, and write only the
/// scratch it is given. commit() runs exactly once per grain, before the call returns. Neither may throw.
class takeover_work {
 public:
  virtual ~takeover_work() = default;
  /// Floats of scratch a grain of `n_items` items needs.
  virtual size_t scratch_floats(int64_t n_items) const = 0;
  /// Computes items [begin, end) into `scratch`.
  virtual void compute(int64_t begin, int64_t end, float* scratch) const noexcept = 0;
  /// Writes what compute() left in `scratch` for items [begin, end) to the outputs.
  virtual void commit(int64_t begin, int64_t end, const float* scratch) const noexcept = 0;
  /// Called on pool thread `thread_index` (0: the caller) once it has no grain of this call left to claim, while it
  /// waits for the others' grains (the caller) or for the next call (a worker): it may read ahead what that thread
  /// will likely need next (cache prefetches: nothing it writes may be seen), returning soon after `stop()` turns
  /// true. A thread's first grain of a call is the first of its home (takeover_split::home_begin), so it can tell
  /// which memory it reads first. The default does nothing.
  virtual void idle(int thread_index, const std::function<bool()>& stop) const noexcept {
    (void)thread_index;
    (void)stop;
  }
};

/// How parallel_for_takeover cuts its items into grains, and which grains each pool thread claims first.
struct takeover_split {
  std::vector<int64_t> bounds;  ///< grain g: items [bounds[g], bounds[g + 1]); bounds[0] is 0
  /// Pool thread i's home: grains [home_begin[i], home_begin[i + 1]), which it claims first, in order. Grains from
  /// home_begin.back() on are shared, claimed in order by any thread once its home is done. Then a thread takes the
  /// back half of the largest unclaimed rest of another thread's range and claims it in order as its own, so that
  /// both go on reading forward.
  std::vector<int64_t> home_begin;

  int64_t n_grains() const { return static_cast<int64_t>(bounds.size()) - 1; }
  bool operator==(const takeover_split&) const = default;
};

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

  /// How many chunks parallel_for(n) makes: min(n, 4 x size()), 1 for a one-thread pool. Several per thread, so a
  /// thread the OS takes off its core mid-call holds the call up by one small chunk while the others take the rest.
  int64_t chunks_for(int64_t n) const;

  /// Splits [0, n) into chunks_for(n) contiguous chunks of near-equal length (the same boundaries whoever runs
  /// them), runs fn(begin, end) on each, the caller and the workers claiming chunks in order, and returns when all
  /// have run. An exception thrown by fn is rethrown here after every chunk has finished (the first one wins).
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  /// Like parallel_for but hands out chunks of `grain` indices on demand, for work items of uneven cost.
  void parallel_for_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

  /// Guided self-scheduling: hands out contiguous grains on demand, in order, each of
  /// clamp(left / (2 x size()), min_grain, max_grain) indices where `left` is what no thread has claimed yet. Long
  /// grains while much is left (a streaming kernel keeps its read streams long), short ones at the end (a thread
  /// waits for the last grain of another at most min_grain indices' time).
  void parallel_for_guided(int64_t n, int64_t min_grain, int64_t max_grain,
                           const std::function<void(int64_t begin, int64_t end)>& fn);

  /// Guided like parallel_for_guided, for work that may be computed twice (takeover_work): when the caller has run
  /// out of grains and another thread has held one for much longer than the caller takes for that many items (the OS
  /// took it off its core: the machine is shared), the caller computes that grain itself, and whichever thread
  /// finishes first commits it. The call returns once every grain is committed, without waiting for a thread that
  /// lost its grain: that thread may still be inside work->compute() (its result is then dropped), which is why the
  /// pool shares ownership of `work`. On a quiet machine it runs as parallel_for_guided does.
  /// The grains are guided_split(n, min_grain, max_grain)'s.
  void parallel_for_takeover(int64_t n, int64_t min_grain, int64_t max_grain,
                             std::shared_ptr<const takeover_work> work);
  /// The same over any split of its items (guided_split, home_split); the call keeps the split's vectors.
  void parallel_for_takeover(takeover_split split, std::shared_ptr<const takeover_work> work);

  /// Guided grains of [0, n), as parallel_for_guided cuts them; thread i's home is grain i (its first), the rest are
  /// shared.
  takeover_split guided_split(int64_t n, int64_t min_grain, int64_t max_grain) const;
  /// Homes of near-equal items: thread i's home is items [home_items_begin(n, size(), i), that of i + 1), cut into
  /// grains of `grain` items, its last `tail_items` (<= 0: 2 x grain) into grains of `tail_grain` (<= 0: `grain`; the
  /// last grain may be shorter); nothing is shared. Each thread reads through its own items in order, a thread done
  /// with its own taking the back half of another's rest: a kernel can lay its items out so that a thread's grains
  /// continue each other's memory streams (kernels/cpu/matmul_bf16.cpp, home_streams). The short tail bounds how long a
  /// thread that is done waits for the grain another is inside of: the most it can take over is what that one has not
  /// claimed.
  takeover_split home_split(int64_t n, int64_t grain, int64_t tail_grain = 0, int64_t tail_items = 0) const;
  /// Where home i of `n_homes` starts among n items.
  static int64_t home_items_begin(int64_t n, int n_homes, int i) { return n * i / n_homes; }

  /// Where parallel_for_takeover's time goes, for benches: each pool thread's time inside takeover_work::compute, the
  /// calls' count and time from entry to return, and what the calls handed to other threads lost, since
  /// set_takeover_timing(true). The last three count calls that other threads were asked to join (more than one grain
  /// and thread, from outside the pool); a call whose grains all ran on one thread adds nothing to the two times.
  struct takeover_timing {
    std::vector<int64_t> compute_ns;  ///< per pool thread (0: the caller)
    int64_t calls = 0;
    int64_t call_ns = 0;
    int64_t late_start_ns = 0;  ///< per call: from its hand-out until the last of the threads that computed began
    int64_t uneven_end_ns = 0;  ///< per call: from the first of those threads' last grain end until the last one's
    int64_t woken_calls = 0;    ///< calls that found a worker asleep and had to wake it
    /// Per pool thread (0: the caller): time in takeover_work::idle, reading ahead while it had no grain to claim.
    std::vector<int64_t> read_ahead_ns;
    /// The workers' time waiting for the next job, spinning or asleep (summed over the workers): what neither a grain
    /// nor a read-ahead filled.
    int64_t worker_wait_ns = 0;
  };
  /// Turns the timing on (two clock reads per grain, per read-ahead and per worker wait) or off; either way the totals
  /// start from zero unless `keep_totals` (a pause: a bench that runs other work between the steps it times).
  void set_takeover_timing(bool on, bool keep_totals = false);
  /// The totals so far (read while no call runs, or they may be mid-update).
  takeover_timing takeover_timing_totals() const;

  /// Process-wide pool sized by ACTORLLM_NUM_THREADS, else usable_cpu_count() (the CPUs this process may run on,
  /// capped by its cgroup's CPU quota).
  static thread_pool& global();

 private:
  struct takeover_job;

  void worker_main(int index);
  // Publishes job `generation` with `chunks` chunks to claim (0: a takeover job) and wakes sleeping workers.
  void publish(uint64_t generation, int chunks);
  // Claims and computes grains of the takeover job of `generation`, if that is one, as pool thread `index`, until
  // none is left unclaimed; then lets the work read ahead until the next job is published. Returns the time that took.
  std::chrono::nanoseconds run_takeover(uint64_t generation, int index);
  // Claims and runs chunks of job `generation` until none is left.
  void run_claimed(uint64_t generation) noexcept;
  void run_chunk(int index) noexcept;
  bool inside_this_pool() const;

  int n_threads_;
  std::vector<std::thread> workers_;

  // The current job, written by the dispatcher before it publishes the claim word and read by a thread only after it
  // has claimed one of the job's chunks: stable until every chunk is done (chunks_done_ == job_chunks_).
  const std::function<void(int64_t, int64_t)>* job_fn_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  std::exception_ptr job_error_;
  std::mutex error_mutex_;

  // The claim word: the job's generation (high 32 bits), its chunk count (16 bits) and the next unclaimed chunk (low
  // 16 bits). A thread claims chunk i by moving i to i + 1 with a compare-exchange that also checks the generation,
  // so a thread that woke for an earlier job never takes a chunk of a later one.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> chunks_done_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};

  // Sleeping (after the spin budget): workers wait on wake_cv_, the dispatcher on done_cv_. The sleeper counts
  // let the common all-spinning case skip the mutex and the notify.
  std::mutex sleep_mutex_;
  std::condition_variable wake_cv_;
  std::condition_variable done_cv_;
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> dispatcher_sleeping_{false};

  std::mutex dispatch_mutex_;  // one parallel_for at a time from outside threads

  // The current parallel_for_takeover job, if any: a worker takes a reference under the mutex when its generation
  // is current, and keeps the job (and the work) alive for as long as it computes, after the call returned too.
  std::mutex takeover_mutex_;
  std::shared_ptr<takeover_job> takeover_;
  std::atomic<uint64_t> takeover_generation_{0};

  // set_takeover_timing's totals: per pool thread, and per call.
  std::atomic<bool> timing_on_{false};
  std::unique_ptr<std::atomic<int64_t>[]> compute_ns_, read_ahead_ns_;
  std::atomic<int64_t> timed_calls_{0}, timed_call_ns_{0}, timed_late_start_ns_{0}, timed_uneven_end_ns_{0},
      timed_woken_calls_{0}, timed_worker_wait_ns_{0};
};

}  // namespace actorllm
