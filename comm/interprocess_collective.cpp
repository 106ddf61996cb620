// The TP collective between processes of one host over a shared-memory segment.
#include "comm/interprocess_collective.hpp"

#include "comm/comm_error.hpp"
#include "util/check.hpp"
#include "util/futex.hpp"
#include "util/spin_wait.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>
#include <random>

namespace actorllm::comm {
namespace {

constexpr uint64_t segment_magic = 0x61636c6c6d73686dULL;  // "aclmshm"

/// One rank's line of the segment: the number of the last exchange it arrived at, and its pid for liveness; a futex
/// word bumped at each arrival, and how many peers sleep on it.
struct alignas(64) rank_state {
  std::atomic<uint64_t> arrived{0};
  std::atomic<int32_t> pid{0};
  std::atomic<uint32_t> arrivals{0};
  std::atomic<uint32_t> sleepers{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the segment's atomics must work across processes");

/// How long a waiting rank polls before it sleeps on the peer's futex word. The ranks mostly arrive within
/// microseconds of each other, but each worker process receives a step's plan on its own, so the first collective of
/// a step waits for a peer's wake-up (on a virtual machine, that of a halted virtual CPU): a quiet machine is fastest
/// polling long. On cores shared with other work a long poll takes the busy threads' turn and counts against the
/// rank's share, so once a poll sees the rank taken off its core (`descheduled_gap`) the rank polls only briefly
/// for a while. Polling only (cpu_relax), never sched_yield: on EEVDF each yield pushes the rank's virtual deadline a
/// time slice later (util/spin_wait.hpp), and the ranks then wait for each other behind the busy threads. On 2 vCPUs,
/// stories260K at tp 2 through `serve` (48-token completions, medians of 30): quiet 0.029-0.031 s this way, 0.024-0.031
/// polling 200 us always, 0.028-0.029 with the 5 ms of yields before; beside two busy loops 0.09-0.11 s, 0.04-0.20 and
/// 0.43-0.59.
constexpr auto long_poll = std::chrono::microseconds{2000};
constexpr auto brief_poll = std::chrono::microseconds{5};
constexpr auto descheduled_gap = std::chrono::microseconds{50};
constexpr auto poll_briefly_for = std::chrono::milliseconds{100};
/// A sleeping rank wakes at least this often to see whether a peer died, gave up or ran past the timeout.
constexpr auto liveness_interval = std::chrono::milliseconds{10};

/// False once `pid` has exited (gone, or a zombie its parent has not reaped yet).
bool process_alive(int32_t pid) {
  if (pid <= 0)
    return true;  // not published yet
  if (::kill(pid, 0) != 0 && errno == ESRCH)
    return false;
  std::ifstream stat{fmt::format("/proc/{}/stat", pid)};
  std::string text;
  std::getline(stat, text);
  const auto paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size())
    return true;  // no /proc: the kill() above is all we can tell
  const char state = text[paren + 2];
  return state != 'Z' && state != 'X';
}

/// Names this process's pid namespace: pids published by ranks in another one mean nothing here.
std::string pid_namespace() {
  char buf[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string{"unknown"};
}

std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

/// The segment: this header, one rank_state per rank, then two parities of one slot of `capacity` floats per rank
/// (exchange k uses parity k & 1, so a rank that runs ahead never overwrites a slot a slower rank still reads).
struct alignas(64) interprocess_collective::segment {
  uint64_t magic = segment_magic;
  int32_t size = 0;
  int64_t capacity = 0;
  std::atomic<int32_t> failed_rank{-1};  ///< the first rank that gave up, so the others stop waiting for it

  rank_state* ranks() { return reinterpret_cast<rank_state*>(this + 1); }
  float* data() { return reinterpret_cast<float*>(ranks() + size); }
  static size_t bytes_for(int size, int64_t capacity) {
    return sizeof(segment) + static_cast<size_t>(size) * sizeof(rank_state) +
           2 * static_cast<size_t>(size) * static_cast<size_t>(capacity) * sizeof(float);
  }
};

std::unique_ptr<interprocess_collective> interprocess_collective::try_create(rendezvous_store& store,
                                                                             const std::string& name, int rank,
                                                                             int size, interprocess_options options) {
  ACTORLLM_CHECK(size >= 1 && rank >= 0 && rank < size, "rank outside its group");
  ACTORLLM_CHECK(options.capacity_floats >= 1, "an interprocess group needs a positive capacity");
  const size_t bytes = segment::bytes_for(size, options.capacity_floats);
  segment* seg = nullptr;
  std::string shm_name;

  if (rank == 0) {
    std::random_device entropy;
    shm_name = fmt::format("/actorllm-{}-{:08x}{:08x}", ::getpid(), entropy(), entropy());
    const int fd = ::shm_open(shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) {
      // Reserve the pages now: a /dev/shm too small for them (a container's 64 MiB, say) then means Gloo here,
      // where a merely truncated file would fail later with SIGBUS on first touch.
      if (::ftruncate(fd, static_cast<off_t>(bytes)) == 0 && ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0) {
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          seg = new (p) segment;
          seg->size = size;
          seg->capacity = options.capacity_floats;
          for (int r = 0; r < size; ++r)
            new (seg->ranks() + r) rank_state;
        }
      }
      ::close(fd);
    }
    if (seg == nullptr) {
      ::shm_unlink(shm_name.c_str());
      shm_name.clear();
    }
    store.set(name + "/segment", bytes_of(seg != nullptr ? shm_name : std::string{"none"}));
  } else {
    const auto value = store.get(name + "/segment", options.timeout);
    shm_name.assign(value.begin(), value.end());
    const int fd = shm_name.empty() || shm_name.front() != '/' ? -1 : ::shm_open(shm_name.c_str(), O_RDWR, 0);
    struct stat st {};
    if (fd >= 0 && ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        seg = static_cast<segment*>(p);
        if (seg->magic != segment_magic || seg->size != size || seg->capacity != options.capacity_floats) {
          ::munmap(p, bytes);
          seg = nullptr;
        }
      }
    }
    if (fd >= 0)
      ::close(fd);
  }

  // From here on, however this ends (agreement, fallback, or a rendezvous that times out and throws): rank 0 removes
  // the name, and a rank that does not use the segment unmaps it.
  struct cleanup {
    std::string unlink_name;
    void* mapped = nullptr;
    size_t bytes = 0;
    ~cleanup() {
      if (!unlink_name.empty())
        ::shm_unlink(unlink_name.c_str());
      if (mapped != nullptr)
        ::munmap(mapped, bytes);
    }
  } on_exit{rank == 0 ? shm_name : std::string{}, seg, bytes};

  // Every rank says whether it mapped the segment, and in which pid namespace it lives (liveness checks compare
  // pids): the group uses the segment only when all mapped it from one namespace, and all decide alike.
  const std::string here = pid_namespace();
  if (seg != nullptr)
    seg->ranks()[rank].pid.store(static_cast<int32_t>(::getpid()), std::memory_order_release);
  store.set(fmt::format("{}/mapped/{}", name, rank), bytes_of(seg != nullptr ? "1 " + here : std::string{"0"}));
  bool all = true;
  for (int r = 0; r < size; ++r) {
    const auto value = store.get(fmt::format("{}/mapped/{}", name, r), options.timeout);
    all = all && std::string(value.begin(), value.end()) == "1 " + here;
  }
  if (!all)
    return nullptr;
  on_exit.mapped = nullptr;  // the collective owns the mapping now
  return std::unique_ptr<interprocess_collective>(new interprocess_collective(name, rank, size, options, seg, bytes));
}

interprocess_collective::interprocess_collective(std::string name, int rank, int size, interprocess_options options,
                                                 segment* mapped, size_t mapped_bytes)
    : name_(std::move(name)),
      rank_(rank),
      size_(size),
      options_(options),
      segment_(mapped),
      mapped_bytes_(mapped_bytes) {}

interprocess_collective::~interprocess_collective() { ::munmap(segment_, mapped_bytes_); }

float* interprocess_collective::slot(uint64_t op, int r) const {
  const auto index = static_cast<size_t>(op & 1) * static_cast<size_t>(size_) + static_cast<size_t>(r);
  return segment_->data() + index * static_cast<size_t>(segment_->capacity);
}

void interprocess_collective::fail(const std::string& what) {
  int32_t none = -1;
  segment_->failed_rank.compare_exchange_strong(none, rank_);
  broken_ = fmt::format("interprocess group '{}' rank {} of {}: {}", name_, rank_, size_, what);
  throw comm_error(broken_);
}

void interprocess_collective::throw_if_broken() const {
  if (!broken_.empty())
    throw comm_error("the group is broken since an earlier failure: " + broken_);
}

void interprocess_collective::fail_if_one_gave_up(const char* what) {
  if (const int32_t failed = segment_->failed_rank.load(std::memory_order_acquire); failed >= 0)
    fail(fmt::format("{}: rank {} gave up on the group", what, failed));
}

void interprocess_collective::exchange(const char* what) {
  ++op_;
  rank_state* ranks = segment_->ranks();
  rank_state& me = ranks[rank_];
  me.arrived.store(op_, std::memory_order_seq_cst);
  me.arrivals.fetch_add(1, std::memory_order_seq_cst);
  // Either a sleeper counted itself before this load (and is woken), or its futex call sees the bumped word.
  if (me.sleepers.load(std::memory_order_seq_cst) > 0)
    futex_wake_all(me.arrivals, futex_scope::shared_memory);
  const auto start = std::chrono::steady_clock::now();
  for (int q = 0; q < size_; ++q) {
    rank_state& peer = ranks[q];
    const auto arrived = [&] { return peer.arrived.load(std::memory_order_acquire) >= op_; };
    const bool brief = std::chrono::steady_clock::now() < poll_briefly_until_;
    const spin_outcome polled = spin_until_descheduled(arrived, brief ? brief_poll : long_poll, descheduled_gap);
    if (polled == spin_outcome::held)
      continue;
    if (polled == spin_outcome::descheduled)
      poll_briefly_until_ = std::chrono::steady_clock::now() + poll_briefly_for;
    for (;;) {
      const uint32_t seen = peer.arrivals.load(std::memory_order_seq_cst);
      if (arrived())
        break;
      const int32_t pid = peer.pid.load(std::memory_order_acquire);
      fail_if_one_gave_up(what);
      // A peer may arrive and exit between the look at its arrival above and this one at its pid (the last
      // collective of a run): only a peer that is gone and still has not arrived failed.
      if (!process_alive(pid) && !arrived())
        fail(fmt::format("{}: rank {} (pid {}) exited", what, q, pid));
      if (std::chrono::steady_clock::now() - start > options_.timeout)
        fail(fmt::format("{}: rank {} (pid {}) did not arrive within {} ms", what, q, pid, options_.timeout.count()));
      peer.sleepers.fetch_add(1, std::memory_order_seq_cst);
      futex_wait(peer.arrivals, seen, futex_scope::shared_memory, liveness_interval);
      peer.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }
  // A rank that gave up had published its arrival first: what it left in its slot is no contribution.
  fail_if_one_gave_up(what);
}

void interprocess_collective::all_reduce_sum(float* data, int64_t n) {
  ACTORLLM_CHECK(n >= 0, "negative element count");
  if (n == 0 || size_ == 1)
    return;
  throw_if_broken();
  const int64_t capacity = segment_->capacity;
  for (int64_t offset = 0; offset < n; offset += capacity) {
    const auto len = static_cast<size_t>(std::min(capacity, n - offset));
    float* dst = data + offset;
    std::memcpy(slot(op_ + 1, rank_), dst, len * sizeof(float));
    exchange("all_reduce_sum");
    // Rank order, like shared_memory_collective: every rank computes the same sums bit for bit.
    std::memcpy(dst, slot(op_, 0), len * sizeof(float));
    for (int r = 1; r < size_; ++r) {
      const float* in = slot(op_, r);
      for (size_t i = 0; i < len; ++i)
        dst[i] += in[i];
    }
  }
}

void interprocess_collective::all_gather(const float* in, int64_t n_per_rank, float* out) {
  ACTORLLM_CHECK(n_per_rank >= 0, "negative element count");
  if (size_ == 1 || n_per_rank == 0) {
    if (in != out)
      std::memmove(out, in, static_cast<size_t>(n_per_rank) * sizeof(float));
    return;
  }
  throw_if_broken();
  const int64_t capacity = segment_->capacity;
  for (int64_t offset = 0; offset < n_per_rank; offset += capacity) {
    const auto len = static_cast<size_t>(std::min(capacity, n_per_rank - offset));
    // `in` may be this rank's own part of `out`: it is read before any part of `out` is written, and the rank's
    // own part is written back with the same values.
    std::memcpy(slot(op_ + 1, rank_), in + offset, len * sizeof(float));
    exchange("all_gather");
    for (int r = 0; r < size_; ++r)
      std::memcpy(out + r * n_per_rank + offset, slot(op_, r), len * sizeof(float));
  }
}

std::vector<int64_t> interprocess_collective::all_to_all_rows(const float* send, std::span<const int64_t> send_rows,
                                                              int64_t width, std::vector<float>& recv) {
  const auto un = static_cast<size_t>(size_);
  const auto me = static_cast<size_t>(rank_);
  const int64_t n_send = rows_to_send(send_rows, width);
  if (size_ == 1)
    return all_to_all_alone(send, n_send, width, recv);
  std::vector<int64_t> from(un, 0);
  throw_if_broken();
  const int64_t capacity = segment_->capacity;
  // What each rank puts through its slot is one stream: its counts (one int64 per rank, two floats' room each), then
  // its rows in destination order. Exchange k carries the stream's floats [k * capacity, (k + 1) * capacity); the
  // first carries the counts whole, so every rank learns from it how many exchanges the largest stream takes.
  const auto header = static_cast<int64_t>(un * sizeof(int64_t) / sizeof(float));
  ACTORLLM_CHECK(capacity >= header, "all_to_all_rows: the slot cannot hold every rank's row count");
  const int64_t my_length = header + n_send * width;
  auto write_piece = [&](int64_t piece) {
    float* dst = slot(op_ + 1, rank_);
    const int64_t begin = piece * capacity;
    const int64_t end = std::min(my_length, begin + capacity);
    for (int64_t at = begin; at < end;) {
      if (at < header) {  // the counts
        std::memcpy(dst, send_rows.data(), static_cast<size_t>(header) * sizeof(float));
        at = header;
        continue;
      }
      std::memcpy(dst + (at - begin), send + (at - header), static_cast<size_t>(end - at) * sizeof(float));
      at = end;
    }
  };

  write_piece(0);
  exchange("all_to_all_rows");
  // Every rank's counts, from the first piece: where this rank's run lies in each stream, and how long each is.
  std::vector<int64_t> run_begin(un, 0);
  int64_t pieces = 1;
  int64_t n_recv = 0;
  for (size_t src = 0; src < un; ++src) {
    std::vector<int64_t> counts(un);
    std::memcpy(counts.data(), slot(op_, static_cast<int>(src)), un * sizeof(int64_t));
    int64_t before = 0, total = 0;
    for (size_t d = 0; d < un; ++d) {
      if (counts[d] < 0)
        fail(fmt::format("all_to_all_rows: rank {} sent a negative row count", src));
      before += d < me ? counts[d] : 0;
      total += counts[d];
    }
    from[src] = counts[me];
    n_recv += from[src];
    run_begin[src] = header + before * width;
    pieces = std::max(pieces, (header + total * width + capacity - 1) / capacity);
  }
  recv.resize(static_cast<size_t>(n_recv * width));
  std::vector<int64_t> recv_offset(un, 0);  // where each source's run goes in `recv` (source order)
  for (size_t src = 1; src < un; ++src)
    recv_offset[src] = recv_offset[src - 1] + from[src - 1] * width;
  // This rank's own run is a local copy.
  if (from[me] > 0)
    std::memcpy(recv.data() + recv_offset[me], send + (run_begin[me] - header),
                static_cast<size_t>(from[me] * width) * sizeof(float));
  for (int64_t piece = 0; piece < pieces; ++piece) {
    if (piece > 0) {
      write_piece(piece);
      exchange("all_to_all_rows");
    }
    const int64_t window_begin = piece * capacity;
    const int64_t window_end = window_begin + capacity;
    for (size_t src = 0; src < un; ++src) {
      if (src == me || from[src] == 0)
        continue;
      const int64_t begin = std::max(run_begin[src], window_begin);
      const int64_t end = std::min(run_begin[src] + from[src] * width, window_end);
      if (begin >= end)
        continue;
      std::memcpy(recv.data() + recv_offset[src] + (begin - run_begin[src]),
                  slot(op_, static_cast<int>(src)) + (begin - window_begin),
                  static_cast<size_t>(end - begin) * sizeof(float));
    }
  }
  count_all_to_all(n_send - send_rows[me], n_recv - from[me], width);
  return from;
}

}  // namespace actorllm::comm
