// Fork-join thread pool: spin-then-sleep workers driven by a generation counter.
#include "util/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <utility>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include "util/check.hpp"
#include "util/cpu_count.hpp"
#include "util/cpu_relax.hpp"
#include "util/log.hpp"
#include "util/spin_wait.hpp"

namespace actorllm {
namespace {

// How long an idle worker (or a dispatcher waiting for stragglers) spins before it sleeps. Kernel calls of one
// decode step mostly come a few microseconds apart; spinning across those gaps saves the futex round trip (tens of
// microseconds) without burning a core for long once the engine goes idle, or the share of a core the machine gives
// this thread beside other work (util/spin_wait.hpp: 50 us measured as fast as 200 us on a quiet machine).
constexpr auto spin_budget = std::chrono::microseconds(50);

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The pool (if any) whose chunk the current thread is running: nested parallel_for calls run inline.
thread_local const thread_pool* current_pool = nullptr;

struct current_pool_scope {
  const thread_pool* saved;
  explicit current_pool_scope(const thread_pool* p) : saved(current_pool) { current_pool = p; }
  ~current_pool_scope() { current_pool = saved; }
};

// ACTORLLM_NUM_THREADS, at most the usable CPUs: a thread more than the CPUs the process may use (its affinity, its
// cgroup quota) is one that is descheduled at every barrier.
int threads_from_env() {
  const int usable = usable_cpu_count();
  if (const char* env = std::getenv("ACTORLLM_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > usable)
      log::warning("thread_pool",
                   "ACTORLLM_NUM_THREADS={} is more than the {} CPU(s) this process may use (affinity "
                   "and cgroup quota): using {}",
                   n, usable, usable);
    if (n >= 1)
      return std::min(n, usable);
  }
  return usable;
}

// Chunks per thread (thread_pool::chunks_for). Measured with bench_cpu_decode --hog 2 on the 2-vCPU VM, TinyLlama
// shape, paired runs: batch-1 decode beside the hog at 43% and 36% of quiet with claimed chunks, 4 per thread,
// against 36% and 31% with one assigned chunk per thread (a fair share is 50%).
constexpr int chunks_per_thread = 4;

// The next grain of guided self-scheduling with `left` indices unclaimed (thread_pool::parallel_for_guided).
int64_t guided_grain(int64_t left, int64_t spread, int64_t min_grain, int64_t max_grain) {
  return std::min(left, std::clamp(left / spread, min_grain, max_grain));
}

constexpr uint64_t claim_word(uint64_t generation, int chunks, int next) {
  return (generation << 32) | (static_cast<uint64_t>(chunks) << 16) | static_cast<uint64_t>(next);
}

// ACTORLLM_PIN_THREADS=1 pins worker i to the i-th CPU this process may run on, when the pool has as many threads as
// there are such CPUs (it owns the machine). Off by default: the calling thread (an engine or actor thread) floats,
// and on a 2-vCPU VM it was measured sharing the pinned worker's CPU at times (bench_cpu_decode, alternated runs:
// bandwidth probe 33 GB/s pinned against 43-47 unpinned), which costs more than migrations do.
void pin_worker(int index, int n_threads) {
#if defined(__linux__)
  if (const char* env = std::getenv("ACTORLLM_PIN_THREADS"); env == nullptr || std::string_view{env} != "1")
    return;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) != n_threads)
    return;
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed))
      continue;
    if (seen++ == index) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);  // advice: on failure the thread just floats
      return;
    }
  }
#else
  (void)index;
  (void)n_threads;
#endif
}

}  // namespace

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads) {
  ACTORLLM_CHECK(n_threads >= 1, "thread_pool needs at least one thread");
  compute_ns_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(n_threads));
  read_ahead_ns_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(n_threads));
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  ACTORLLM_CHECK(n_threads <= 0xffff / chunks_per_thread, "thread_pool: at most 16383 threads");
  for (int i = 1; i < n_threads; ++i)
    workers_.emplace_back([this, i, n_threads] {
      pin_worker(i, n_threads);
      worker_main(i);
    });
}

thread_pool::~thread_pool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // wakes every worker, which then sees stop_
  {
    std::lock_guard lock(sleep_mutex_);
    wake_cv_.notify_all();
  }
  for (auto& t : workers_)
    t.join();
}

bool thread_pool::inside_this_pool() const { return current_pool == this; }

int64_t thread_pool::chunks_for(int64_t n) const {
  return n_threads_ == 1 ? std::min<int64_t>(n, 1) : std::min<int64_t>(n, int64_t{chunks_per_thread} * n_threads_);
}

void thread_pool::run_chunk(int index) noexcept {
  if (index >= job_chunks_)
    return;
  int64_t begin = job_n_ * index / job_chunks_;
  int64_t end = job_n_ * (index + 1) / job_chunks_;
  try {
    current_pool_scope scope(this);
    (*job_fn_)(begin, end);
  } catch (...) {
    std::lock_guard lock(error_mutex_);
    if (!job_error_)
      job_error_ = std::current_exception();
  }
}

void thread_pool::run_claimed(uint64_t generation) noexcept {
  const uint64_t gen = generation & 0xffffffffu;
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    const int chunks = static_cast<int>((c >> 16) & 0xffffu), next = static_cast<int>(c & 0xffffu);
    if ((c >> 32) != gen || next >= chunks)
      return;  // another job's word, or every chunk of this one is taken
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;  // c now holds the current word
    run_chunk(next);
    // The thread that finishes the last chunk wakes a dispatcher that went to sleep waiting for it.
    if (chunks_done_.fetch_add(1, std::memory_order_seq_cst) + 1 == chunks &&
        dispatcher_sleeping_.load(std::memory_order_seq_cst)) {
      std::lock_guard lock(sleep_mutex_);
      done_cv_.notify_one();
    }
    c = claim_.load(std::memory_order_acquire);
  }
}

void thread_pool::worker_main(int index) {
  uint64_t seen = 0;
  std::chrono::nanoseconds idle_spent{0};  // in the last job's takeover_work::idle, already awake
  for (;;) {
    auto changed = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    const bool timed = timing_on_.load(std::memory_order_relaxed);
    const int64_t wait_start = timed ? now_ns() : 0;
    // Time spent reading ahead counts against the spin: the thread burns no more of a shared core than it did.
    if (!spin_until(changed, std::max<std::chrono::nanoseconds>(spin_budget - idle_spent, {}))) {
      std::unique_lock lock(sleep_mutex_);
      sleeping_workers_.fetch_add(1, std::memory_order_seq_cst);
      while (generation_.load(std::memory_order_seq_cst) == seen)
        wake_cv_.wait(lock);
      sleeping_workers_.fetch_sub(1, std::memory_order_seq_cst);
    }
    if (timed && timing_on_.load(std::memory_order_relaxed))
      timed_worker_wait_ns_.fetch_add(now_ns() - wait_start, std::memory_order_relaxed);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire))
      return;
    run_claimed(seen);
    idle_spent = run_takeover(seen, index);
  }
}

void thread_pool::publish(uint64_t generation, int chunks) {
  // The job's fields before the claim word (release): a thread that claims a chunk sees them.
  claim_.store(claim_word(generation & 0xffffffffu, chunks, 0), std::memory_order_release);
  // seq_cst publish pairs with the workers' seq_cst sleeper registration: either a worker sees the new
  // generation before it sleeps, or we see it asleep and wake it.
  generation_.store(generation, std::memory_order_seq_cst);
  if (sleeping_workers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard lock(sleep_mutex_);
    wake_cv_.notify_all();
  }
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0)
    return;
  const int64_t chunks = chunks_for(n);
  if (chunks == 1 || inside_this_pool()) {
    current_pool_scope scope(this);
    fn(0, n);
    return;
  }

  std::lock_guard dispatch_lock(dispatch_mutex_);
  job_fn_ = &fn;
  job_n_ = n;
  job_chunks_ = static_cast<int>(chunks);
  job_error_ = nullptr;
  chunks_done_.store(0, std::memory_order_relaxed);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  publish(generation, job_chunks_);

  run_claimed(generation);  // the caller takes chunks too, all of them if no worker comes

  auto done = [&] { return chunks_done_.load(std::memory_order_acquire) == job_chunks_; };
  if (!spin_until(done, spin_budget)) {
    std::unique_lock lock(sleep_mutex_);
    dispatcher_sleeping_.store(true, std::memory_order_seq_cst);
    while (chunks_done_.load(std::memory_order_seq_cst) != job_chunks_)
      done_cv_.wait(lock);
    dispatcher_sleeping_.store(false, std::memory_order_relaxed);
  }

  if (job_error_) {
    std::exception_ptr e = job_error_;
    job_error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void thread_pool::parallel_for_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for_guided(n, grain, grain, fn);
}

void thread_pool::parallel_for_guided(int64_t n, int64_t min_grain, int64_t max_grain,
                                      const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0)
    return;
  min_grain = std::max<int64_t>(min_grain, 1);
  max_grain = std::max(max_grain, min_grain);
  const int64_t spread = 2 * static_cast<int64_t>(n_threads_);
  std::atomic<int64_t> next{0};
  // Each participating thread claims grains until none are left; threads that start late find less to do.
  parallel_for(std::min<int64_t>((n + min_grain - 1) / min_grain, n_threads_), [&](int64_t, int64_t) {
    for (;;) {
      int64_t begin = next.load(std::memory_order_relaxed), end = 0;
      do {
        if (begin >= n)
          return;
        end = begin + guided_grain(n - begin, spread, min_grain, max_grain);
      } while (!next.compare_exchange_weak(begin, end, std::memory_order_relaxed));
      fn(begin, end);
    }
  });
}

// ---- parallel_for_takeover --------------------------------------------------------------------------------------

namespace {

// A grain's life: claimed (free -> owned) and computed by its owner, then committed by it (owned -> writing ->
// committed); or taken over by the caller when the owner holds it too long (owned or free -> taken -> committed), the
// owner's result then dropped.
enum grain_state : int { grain_free, grain_owned, grain_writing, grain_taken, grain_committed };

// This thread's scratch for one grain at a time.
float* grain_scratch(size_t n_floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < n_floats)
    scratch.resize(n_floats);
  return scratch.data();
}

// How long the caller lets another thread hold a grain of `items` items before it takes the grain over: twice what
// the caller itself took per item, plus 50 us for a thread a moment late; 1 ms when it ran no grain to time. A thread
// the OS took off its core holds its grain for a time slice (milliseconds), far past this.
int64_t patience_ns(int64_t items, double caller_ns_per_item) {
  constexpr int64_t slack = 50'000, untimed = 1'000'000;
  return caller_ns_per_item > 0 ? slack + static_cast<int64_t>(2.0 * caller_ns_per_item * static_cast<double>(items))
                                : untimed;
}

}  // namespace

struct thread_pool::takeover_job {
  uint64_t generation = 0;
  std::shared_ptr<const takeover_work> work;
  std::atomic<int64_t>* compute_ns = nullptr;     // per pool thread, when the pool times its calls
  std::atomic<int64_t>* read_ahead_ns = nullptr;  // the same, for the time in work->idle
  // When timed, per pool thread: when it began its first grain and ended its last (now_ns; 0: it computed none).
  struct thread_span {
    std::atomic<int64_t> first_start{0}, last_end{0};
  };
  std::unique_ptr<thread_span[]> spans;
  std::vector<int64_t> bounds;      // grain g: items [bounds[g], bounds[g + 1])
  std::vector<int64_t> home_begin;  // takeover_split::home_begin
  std::unique_ptr<std::atomic<int>[]> state;
  std::unique_ptr<std::atomic<int64_t>[]> claimed_ns;  // when the owner claimed it (now_ns)
  // Per pool thread: the grains it claims from the front, [front, back) packed as front << 32 | back. Starts as its
  // home; a thread with none left takes the back half of the largest other range as its own (range stealing), so
  // both go on reading forward.
  std::unique_ptr<std::atomic<uint64_t>[]> range;
  std::atomic<int64_t> next{0};  // the next unclaimed shared grain
  std::atomic<int64_t> n_committed{0};

  int64_t n_grains() const { return static_cast<int64_t>(bounds.size()) - 1; }
  int n_homes() const { return static_cast<int>(home_begin.size()) - 1; }
  int64_t home_end(int h) const { return home_begin[static_cast<size_t>(h) + 1]; }
  int64_t begin_of(int64_t g) const { return bounds[static_cast<size_t>(g)]; }
  int64_t end_of(int64_t g) const { return bounds[static_cast<size_t>(g) + 1]; }
  // This thread's scratch, large enough for grain g.
  float* scratch_for(int64_t g) const { return grain_scratch(work->scratch_floats(end_of(g) - begin_of(g))); }

  // Makes grain g this thread's if it is free. The time is stored before the state changes (finish() reads it for an
  // owned grain); a thread that loses the race for a first grain may have moved that time a moment later, which only
  // delays a takeover by as much.
  bool try_own(int64_t g) {
    if (state[static_cast<size_t>(g)].load(std::memory_order_relaxed) != grain_free)
      return false;
    claimed_ns[static_cast<size_t>(g)].store(now_ns(), std::memory_order_relaxed);
    int expected = grain_free;
    return state[static_cast<size_t>(g)].compare_exchange_strong(expected, grain_owned, std::memory_order_acq_rel);
  }

  static uint64_t pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) << 32 | static_cast<uint64_t>(back);
  }
  static int64_t front_of(uint64_t r) { return static_cast<int64_t>(r >> 32); }
  static int64_t back_of(uint64_t r) { return static_cast<int64_t>(r & 0xffffffffu); }

  // Claims the front grain of thread i's range (its own claim): its index, or -1 when the range is empty.
  int64_t claim_front(int i) {
    uint64_t r = range[i].load(std::memory_order_relaxed);
    for (;;) {
      const int64_t front = front_of(r), back = back_of(r);
      if (front >= back)
        return -1;
      if (!range[i].compare_exchange_weak(r, pack(front + 1, back), std::memory_order_relaxed))
        continue;
      if (try_own(front))
        return front;
      r = range[i].load(std::memory_order_relaxed);
    }
  }

  // Moves the back half of the largest other range (at least one grain) to thread i's range; false when every other
  // range is empty.
  bool steal_into(int i) {
    for (;;) {
      int victim = -1;
      uint64_t vr = 0;
      int64_t largest = 0;
      for (int k = 0; k < n_homes(); ++k) {
        const uint64_t r = range[k].load(std::memory_order_relaxed);
        if (k != i && back_of(r) - front_of(r) > largest) {
          victim = k;
          vr = r;
          largest = back_of(r) - front_of(r);
        }
      }
      if (victim < 0)
        return false;
      // The whole range when it holds one grain, else its back half [mid, back).
      const int64_t front = front_of(vr), back = back_of(vr);
      const int64_t mid = back - front == 1 ? front : front + (back - front + 1) / 2;
      if (range[victim].compare_exchange_strong(vr, back - front == 1 ? pack(back, back) : pack(front, mid),
                                                std::memory_order_relaxed)) {
        range[i].store(pack(mid, back), std::memory_order_relaxed);
        return true;
      }
    }
  }

  // Claims the next shared grain: its index, or -1 when none is left.
  int64_t claim_next() {
    for (;;) {
      const int64_t g = next.fetch_add(1, std::memory_order_relaxed);
      if (g >= n_grains())
        return -1;
      if (try_own(g))
        return g;
    }
  }

  void commit(int64_t g, const float* scratch) {
    work->commit(begin_of(g), end_of(g), scratch);
    state[static_cast<size_t>(g)].store(grain_committed, std::memory_order_release);
    n_committed.fetch_add(1, std::memory_order_acq_rel);
  }

  // Computes grain g on the given scratch (timed for pool thread `index` when the pool times its calls).
  void compute(int64_t g, float* scratch, int index) {
    if (compute_ns == nullptr) {
      work->compute(begin_of(g), end_of(g), scratch);
      return;
    }
    const int64_t start = now_ns();
    work->compute(begin_of(g), end_of(g), scratch);
    const int64_t end = now_ns();
    compute_ns[index].fetch_add(end - start, std::memory_order_relaxed);
    int64_t unset = 0;
    spans[index].first_start.compare_exchange_strong(unset, start, std::memory_order_relaxed);
    spans[index].last_end.store(end, std::memory_order_relaxed);
  }

  // The timed call's late start and uneven end (thread_pool::takeover_timing), over the threads that computed, from
  // its hand-out at `published`: {0, 0} when fewer than two did.
  std::pair<int64_t, int64_t> start_and_end_spread(int n_threads, int64_t published) const {
    int64_t last_start = 0, first_end = 0, last_end = 0;
    int computed = 0;
    for (int i = 0; i < n_threads; ++i) {
      const int64_t s = spans[i].first_start.load(std::memory_order_relaxed);
      const int64_t e = spans[i].last_end.load(std::memory_order_relaxed);
      if (s == 0 || e == 0)
        continue;
      ++computed;
      last_start = std::max(last_start, s);
      first_end = first_end == 0 ? e : std::min(first_end, e);
      last_end = std::max(last_end, e);
    }
    if (computed < 2)
      return {0, 0};
    return {std::max<int64_t>(last_start - published, 0), last_end - first_end};
  }

  // Computes grain g, which pool thread `index` owns, and commits it unless it was taken over meanwhile.
  void run_owned(int64_t g, int index) {
    float* scratch = scratch_for(g);
    compute(g, scratch, index);
    int expected = grain_owned;
    if (state[static_cast<size_t>(g)].compare_exchange_strong(expected, grain_writing, std::memory_order_acq_rel))
      commit(g, scratch);
  }

  // Claims and runs grains as pool thread `index` until none is left unclaimed: its home's in order, the shared ones
  // in order, then back halves of what the other threads have left (threads the OS has not run yet, or that read
  // slower; steal_into), each in order; returns the items it ran.
  int64_t run_claimed(int index) {
    int64_t items = 0;
    auto run = [&](int64_t g) {
      run_owned(g, index);
      items += end_of(g) - begin_of(g);
    };
    auto run_own_range = [&] {
      for (int64_t g = claim_front(index); g >= 0; g = claim_front(index))
        run(g);
    };
    if (index < n_homes())
      run_own_range();
    for (int64_t g = claim_next(); g >= 0; g = claim_next())
      run(g);
    if (index < n_homes())
      while (steal_into(index))
        run_own_range();
    for (int64_t g = 0; g < home_begin.back(); ++g)  // a thread past the homes, or grains a thief has not claimed yet
      if (try_own(g))
        run(g);
    return items;
  }

  // With nothing left to claim: waits until every grain is committed, taking over each one another thread has held
  // past patience_ns. A grain claimed but not yet marked owned counts from the start of the wait.
  // Before that, the caller's idle time goes to the work's read-ahead (takeover_work::idle), until every grain is in.
  void finish(double ns_per_item) {
    const int64_t waiting_since = now_ns();
    auto all_committed = [this] { return n_committed.load(std::memory_order_acquire) >= n_grains(); };
    if (!all_committed()) {
      work->idle(0, all_committed);
      if (read_ahead_ns != nullptr)
        read_ahead_ns[0].fetch_add(now_ns() - waiting_since, std::memory_order_relaxed);
    }
    int64_t first_open = 0;
    while (n_committed.load(std::memory_order_acquire) < n_grains()) {
      while (first_open < n_grains() &&
             state[static_cast<size_t>(first_open)].load(std::memory_order_acquire) == grain_committed)
        ++first_open;
      const int64_t now = now_ns();
      bool took = false;
      for (int64_t g = first_open; g < n_grains(); ++g) {
        const int s = state[static_cast<size_t>(g)].load(std::memory_order_acquire);
        if (s != grain_owned && s != grain_free)
          continue;
        const int64_t since =
            s == grain_owned ? claimed_ns[static_cast<size_t>(g)].load(std::memory_order_relaxed) : waiting_since;
        const int64_t held = end_of(g) - begin_of(g);
        if (now - since > patience_ns(held, ns_per_item))
          took = take_over(g, s) || took;
      }
      if (!took)
        cpu_relax();  // never sched_yield: see util/spin_wait.hpp
    }
  }

  // Takes grain g over from its owner (state `from`: owned, or claimed but not yet marked) and runs it; false when
  // the owner got to write it first.
  bool take_over(int64_t g, int from) {
    if (!state[static_cast<size_t>(g)].compare_exchange_strong(from, grain_taken, std::memory_order_acq_rel))
      return false;
    float* scratch = scratch_for(g);
    compute(g, scratch, 0);
    commit(g, scratch);
    return true;
  }
};

std::chrono::nanoseconds thread_pool::run_takeover(uint64_t generation, int index) {
  if (takeover_generation_.load(std::memory_order_acquire) != generation)
    return {};
  std::shared_ptr<takeover_job> job;
  {
    std::lock_guard lock(takeover_mutex_);
    if (takeover_ != nullptr && takeover_->generation == generation)
      job = takeover_;
  }
  if (job == nullptr)
    return {};
  current_pool_scope scope(this);
  job->run_claimed(index);
  const int64_t idle_start = now_ns();
  job->work->idle(index, [&] { return generation_.load(std::memory_order_relaxed) != generation; });
  const int64_t idle_ns = now_ns() - idle_start;
  if (job->read_ahead_ns != nullptr && timing_on_.load(std::memory_order_relaxed))
    job->read_ahead_ns[index].fetch_add(idle_ns, std::memory_order_relaxed);
  return std::chrono::nanoseconds(idle_ns);
}

void thread_pool::parallel_for_takeover(int64_t n, int64_t min_grain, int64_t max_grain,
                                        std::shared_ptr<const takeover_work> work) {
  parallel_for_takeover(guided_split(n, min_grain, max_grain), std::move(work));
}

void thread_pool::parallel_for_takeover(takeover_split split, std::shared_ptr<const takeover_work> work) {
  ACTORLLM_CHECK(work != nullptr, "parallel_for_takeover: no work");
  ACTORLLM_CHECK(!split.bounds.empty() && split.bounds.front() == 0 && !split.home_begin.empty() &&
                     split.home_begin.front() == 0 && split.home_begin.back() <= split.n_grains() &&
                     std::is_sorted(split.bounds.begin(), split.bounds.end()) &&
                     std::is_sorted(split.home_begin.begin(), split.home_begin.end()),
                 "parallel_for_takeover: a split whose grains or homes are not in order");
  if (split.n_grains() <= 0)
    return;
  struct call_timer {
    thread_pool& pool;
    bool on = pool.timing_on_.load(std::memory_order_relaxed);
    int64_t start = on ? now_ns() : 0;
    ~call_timer() {
      if (!on)
        return;
      pool.timed_calls_.fetch_add(1, std::memory_order_relaxed);
      pool.timed_call_ns_.fetch_add(now_ns() - start, std::memory_order_relaxed);
    }
  } timer{*this};
  auto job = std::make_shared<takeover_job>();
  job->work = std::move(work);
  if (timer.on) {
    job->compute_ns = compute_ns_.get();
    job->read_ahead_ns = read_ahead_ns_.get();
    job->spans = std::make_unique<takeover_job::thread_span[]>(static_cast<size_t>(n_threads_));
  }
  job->bounds = std::move(split.bounds);
  job->home_begin = std::move(split.home_begin);
  const int64_t n_grains = job->n_grains();
  job->range = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(job->n_homes()));
  for (int h = 0; h < job->n_homes(); ++h)
    job->range[h].store(takeover_job::pack(job->home_begin[static_cast<size_t>(h)], job->home_end(h)),
                        std::memory_order_relaxed);
  job->next.store(job->home_begin.back(), std::memory_order_relaxed);
  job->state = std::make_unique<std::atomic<int>[]>(static_cast<size_t>(n_grains));
  job->claimed_ns = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(n_grains));

  if (n_threads_ == 1 || n_grains == 1 || inside_this_pool()) {
    current_pool_scope scope(this);
    job->run_claimed(0);
    return;
  }

  std::lock_guard dispatch_lock(dispatch_mutex_);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  job->generation = generation;
  {
    std::lock_guard lock(takeover_mutex_);
    takeover_ = job;
  }
  takeover_generation_.store(generation, std::memory_order_release);
  const int64_t published = timer.on ? now_ns() : 0;
  if (timer.on && sleeping_workers_.load(std::memory_order_relaxed) > 0)
    timed_woken_calls_.fetch_add(1, std::memory_order_relaxed);
  publish(generation, 0);  // no chunks: the workers go to run_takeover

  // The caller claims grains too, timing them: its time per item is what "too long" is measured against.
  {
    current_pool_scope scope(this);
    const int64_t start = now_ns();
    const int64_t items = job->run_claimed(0);
    job->finish(items > 0 ? static_cast<double>(now_ns() - start) / static_cast<double>(items) : 0.0);
  }
  if (timer.on) {
    const auto [late_start, uneven_end] = job->start_and_end_spread(n_threads_, published);
    timed_late_start_ns_.fetch_add(late_start, std::memory_order_relaxed);
    timed_uneven_end_ns_.fetch_add(uneven_end, std::memory_order_relaxed);
  }

  std::lock_guard lock(takeover_mutex_);
  takeover_.reset();  // a thread still computing a grain it lost keeps its own reference
}

void thread_pool::set_takeover_timing(bool on, bool keep_totals) {
  if (keep_totals) {
    timing_on_.store(on, std::memory_order_relaxed);
    return;
  }
  for (int i = 0; i < n_threads_; ++i) {
    compute_ns_[static_cast<size_t>(i)].store(0, std::memory_order_relaxed);
    read_ahead_ns_[static_cast<size_t>(i)].store(0, std::memory_order_relaxed);
  }
  timed_worker_wait_ns_.store(0, std::memory_order_relaxed);
  timed_calls_.store(0, std::memory_order_relaxed);
  timed_call_ns_.store(0, std::memory_order_relaxed);
  timed_late_start_ns_.store(0, std::memory_order_relaxed);
  timed_uneven_end_ns_.store(0, std::memory_order_relaxed);
  timed_woken_calls_.store(0, std::memory_order_relaxed);
  timing_on_.store(on, std::memory_order_relaxed);
}

thread_pool::takeover_timing thread_pool::takeover_timing_totals() const {
  takeover_timing t;
  for (int i = 0; i < n_threads_; ++i) {
    t.compute_ns.push_back(compute_ns_[static_cast<size_t>(i)].load(std::memory_order_relaxed));
    t.read_ahead_ns.push_back(read_ahead_ns_[static_cast<size_t>(i)].load(std::memory_order_relaxed));
  }
  t.worker_wait_ns = timed_worker_wait_ns_.load(std::memory_order_relaxed);
  t.calls = timed_calls_.load(std::memory_order_relaxed);
  t.call_ns = timed_call_ns_.load(std::memory_order_relaxed);
  t.late_start_ns = timed_late_start_ns_.load(std::memory_order_relaxed);
  t.uneven_end_ns = timed_uneven_end_ns_.load(std::memory_order_relaxed);
  t.woken_calls = timed_woken_calls_.load(std::memory_order_relaxed);
  return t;
}

takeover_split thread_pool::guided_split(int64_t n, int64_t min_grain, int64_t max_grain) const {
  min_grain = std::max<int64_t>(min_grain, 1);
  max_grain = std::max(max_grain, min_grain);
  const int64_t spread = 2 * static_cast<int64_t>(n_threads_);
  takeover_split split;
  for (int64_t b = 0; b < n; b += guided_grain(n - b, spread, min_grain, max_grain))
    split.bounds.push_back(b);
  split.bounds.push_back(std::max<int64_t>(n, 0));
  for (int64_t g = 0; g <= std::min<int64_t>(split.n_grains(), n_threads_); ++g)
    split.home_begin.push_back(g);  // thread i's home: its first grain
  return split;
}

takeover_split thread_pool::home_split(int64_t n, int64_t grain, int64_t tail_grain, int64_t tail_items) const {
  grain = std::max<int64_t>(grain, 1);
  tail_grain = tail_grain <= 0 ? grain : std::min(tail_grain, grain);
  tail_items = tail_items <= 0 ? 2 * grain : tail_items;
  n = std::max<int64_t>(n, 0);
  takeover_split split;
  split.bounds.push_back(0);
  split.home_begin.push_back(0);
  for (int h = 0; h < n_threads_; ++h) {
    const int64_t end = home_items_begin(n, n_threads_, h + 1);
    for (int64_t b = split.bounds.back(); b < end;) {
      b = std::min(end, b + (end - b <= tail_items ? tail_grain : grain));
      split.bounds.push_back(b);
    }
    split.home_begin.push_back(split.n_grains());
  }
  return split;
}

thread_pool& thread_pool::global() {
  static thread_pool pool(threads_from_env());
  return pool;
}

}  // namespace actorllm
