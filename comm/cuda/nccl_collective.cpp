// The NCCL communicator: see nccl_collective.hpp.
#include "comm/cuda/nccl_collective.hpp"

#include "comm/collective_watchdog.hpp"
#include "comm/comm_error.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "util/check.hpp"

#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace actorllm::cuda {

using comm::comm_error;
using clock_type = collective_watchdog::clock;

// Everything the owner thread and the watchdog thread share. Every NCCL call on `comm` is made with `mutex` held: NCCL
// allows one thread at a time on a communicator, and this serialises the owner's calls, the watchdog's polls and an
// abort from a third thread. The owner never waits inside NCCL (the communicator is nonblocking) and never holds the
// mutex while it sleeps, so an abort always gets through.
struct nccl_collective::state {
  state(std::string name, int dev, std::chrono::milliseconds timeout, std::chrono::microseconds poll)
      : where(std::move(name)), device(dev), watchdog(timeout), poll_interval(poll) {}

  std::string where;  // "nccl group 'G' rank r/n"
  int device;
  std::mutex mutex;
  std::condition_variable wake;
  ncclComm_t comm = nullptr;  // null once aborted or destroyed
  collective_watchdog watchdog;
  std::deque<cudaEvent_t> queued;  // one event after each queued operation, oldest first
  std::vector<cudaEvent_t> spare;
  std::chrono::microseconds poll_interval;
  bool stop = false;
  std::thread thread;

  // The communicator's asynchronous error as text; empty when there is none (ncclInProgress is none).
  std::string async_error_locked() {
    if (comm == nullptr)
      return {};
    ncclResult_t async = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &async); r != ncclSuccess)
      return fmt::format("ncclCommGetAsyncError: {}", ncclGetErrorString(r));
    if (async == ncclSuccess || async == ncclInProgress)
      return {};
    return fmt::format("{} ({})", ncclGetErrorString(async), ncclGetLastError(comm));
  }

  // Carries out an abort the watchdog decided.
  void abort_locked() {
    if (comm != nullptr) {
      ncclCommAbort(comm);  // ends the kernels still waiting on peers; its own result has no one left to tell
      comm = nullptr;
    }
    wake.notify_all();
  }

  void request_abort_locked(std::string reason) {
    watchdog.request_abort(std::move(reason));
    if (watchdog.poll(clock_type::now(), false, {}) == watchdog_action::abort)
      abort_locked();
  }

  comm_error broken_locked() const { return comm_error(fmt::format("{}: {}", where, watchdog.reason())); }

  cudaEvent_t take_event() {
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    ACTORLLM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  // The watchdog thread: retires finished operations, aborts on an error, a timeout or a request.
  void run() {
    cudaSetDevice(device);  // event queries need no current device, but NCCL's calls may
    std::unique_lock lock{mutex};
    while (!stop) {
      if (watchdog.aborted() || watchdog.pending() == 0) {
        wake.wait(lock, [&] { return stop || (!watchdog.aborted() && watchdog.pending() > 0); });
        continue;
      }
      bool done = false;
      std::string error = async_error_locked();
      if (!queued.empty()) {
        const cudaError_t q = cudaEventQuery(queued.front());
        done = q == cudaSuccess;
        if (q != cudaSuccess && q != cudaErrorNotReady && error.empty())
          error = fmt::format("cudaEventQuery: {}", cudaGetErrorString(q));
      }
      switch (watchdog.poll(clock_type::now(), done, error)) {
        case watchdog_action::done:
          spare.push_back(queued.front());
          queued.pop_front();
          continue;
        case watchdog_action::abort:
          abort_locked();
          continue;
        case watchdog_action::wait:
          wake.wait_for(lock, poll_interval);
          continue;
      }
    }
  }
};

namespace {

ncclDataType_t nccl_type(dtype t, const char* what) {
  switch (t) {
    case dtype::f32:
      return ncclFloat32;
    case dtype::f16:
      return ncclFloat16;
    case dtype::bf16:
      return ncclBfloat16;
    case dtype::fp8_e4m3:
    case dtype::i32:
    case dtype::i64:
      break;
  }
  ACTORLLM_CHECK(false, fmt::format("{}: NCCL collectives here take f32, f16 or bf16 tensors", what).c_str());
  return ncclFloat32;
}

}  // namespace

// Issues one NCCL operation (or a group) and waits until NCCL has queued it on the stream, then records its event for
// the watchdog. `issue` runs with the mutex held and returns NCCL's result.
template <class Issue>
static void queue_operation(nccl_collective::state& s, cudaStream_t stream, const char* call, Issue&& issue) {
  std::unique_lock lock{s.mutex};
  if (s.watchdog.aborted())
    throw s.broken_locked();
  ncclResult_t r = issue(s.comm);
  // Nonblocking: ncclInProgress means NCCL is still queuing it; poll until it is queued or has failed.
  const auto deadline = clock_type::now() + s.watchdog.timeout();
  while (r == ncclInProgress) {
    lock.unlock();
    std::this_thread::sleep_for(s.poll_interval);
    lock.lock();
    if (s.watchdog.aborted())
      throw s.broken_locked();
    if (ncclResult_t q = ncclCommGetAsyncError(s.comm, &r); q != ncclSuccess)
      r = q;
    if (r == ncclInProgress && clock_type::now() > deadline) {
      s.request_abort_locked(fmt::format("{} was not queued within {} ms", call, s.watchdog.timeout().count()));
      throw s.broken_locked();
    }
  }
  if (r != ncclSuccess) {
    const std::string last = s.comm != nullptr ? ncclGetLastError(s.comm) : "";
    s.request_abort_locked(
        fmt::format("{} failed: {}{}{}", call, ncclGetErrorString(r), last.empty() ? "" : ": ", last));
    throw s.broken_locked();
  }
  cudaEvent_t e = s.take_event();
  if (cudaError_t err = cudaEventRecord(e, stream); err != cudaSuccess) {
    s.spare.push_back(e);
    throw_cuda_error(err, "cudaEventRecord", __FILE__, __LINE__);
  }
  // The watchdog sleeps on the condition only while nothing is queued; otherwise it polls anyway, and a wake-up per
  // collective (64 per decode step of an 8B model) would cost a context switch each.
  const bool was_idle = s.watchdog.pending() == 0;
  s.queued.push_back(e);
  s.watchdog.started(call, clock_type::now());
  if (was_idle)
    s.wake.notify_all();
}

std::vector<char> nccl_collective::new_unique_id() {
  ncclUniqueId id{};
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
    throw comm_error(fmt::format("ncclGetUniqueId failed: {} ({})", ncclGetErrorString(r), ncclGetLastError(nullptr)));
  return std::vector<char>(id.internal, id.internal + NCCL_UNIQUE_ID_BYTES);
}

std::string nccl_collective::library_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess)
    return "unknown";
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

std::string nccl_collective::header_version() { return fmt::format("{}.{}.{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH); }

nccl_collective::nccl_collective(std::span<const char> unique_id, int rank, int size, cuda_backend& be,
                                 nccl_options options)
    : rank_(rank), size_(size), be_(be) {
  const std::string where = fmt::format("nccl group '{}' rank {}/{}", options.group, rank, size);
  if (unique_id.size() != NCCL_UNIQUE_ID_BYTES)
    throw comm_error(fmt::format("{}: a unique id of {} bytes, not {}", where, unique_id.size(), NCCL_UNIQUE_ID_BYTES));
  if (size < 1 || rank < 0 || rank >= size)
    throw comm_error(fmt::format("{}: not a rank of the group", where));
  state_ = std::make_shared<state>(where, be.where().index, options.timeout, options.poll_interval);
  ncclUniqueId id{};
  std::memcpy(id.internal, unique_id.data(), NCCL_UNIQUE_ID_BYTES);
  ACTORLLM_CUDA_CHECK(cudaSetDevice(state_->device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = options.group.c_str();  // copied by NCCL during init
  {
    state& s = *state_;
    std::unique_lock lock{s.mutex};
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
    s.comm = comm;  // set even while in progress: an abort must be able to reach it
    s.watchdog.started("ncclCommInitRankConfig", clock_type::now());
    const std::chrono::milliseconds init_timeout =
        options.init_timeout.count() > 0 ? options.init_timeout : options.timeout;
    const auto deadline = clock_type::now() + init_timeout;
    while (r == ncclInProgress && comm != nullptr) {
      lock.unlock();
      std::this_thread::sleep_for(options.poll_interval);
      lock.lock();
      if (s.watchdog.aborted())
        break;
      if (ncclResult_t q = ncclCommGetAsyncError(comm, &r); q != ncclSuccess)
        r = q;
      if (r == ncclInProgress && clock_type::now() > deadline)
        s.request_abort_locked(fmt::format("not every rank joined within {} ms", init_timeout.count()));
    }
    if (!s.watchdog.aborted() && r != ncclSuccess) {
      const std::string last = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
      s.request_abort_locked(fmt::format("ncclCommInitRankConfig failed: {} ({})", ncclGetErrorString(r), last));
    }
    if (s.watchdog.aborted())
      throw s.broken_locked();
    // Init is done: retire it without an event.
    s.watchdog.poll(clock_type::now(), true, {});
  }
  state_->thread = std::thread([s = state_] { s->run(); });
}

nccl_collective::~nccl_collective() {
  state& s = *state_;
  {
    std::lock_guard lock{s.mutex};
    s.stop = true;
  }
  s.wake.notify_all();
  if (s.thread.joinable())
    s.thread.join();
  std::unique_lock lock{s.mutex};
  if (s.comm != nullptr) {
    // A clean end flushes what is queued; a peer that is gone would hold it forever, so it is bounded.
    ncclResult_t r = ncclCommFinalize(s.comm);
    const auto deadline = clock_type::now() + s.watchdog.timeout();
    while (r == ncclInProgress && clock_type::now() < deadline) {
      lock.unlock();
      std::this_thread::sleep_for(s.poll_interval);
      lock.lock();
      if (s.comm == nullptr)
        break;  // aborted meanwhile through an abort handle (the worker's abort registry)
      if (ncclResult_t q = ncclCommGetAsyncError(s.comm, &r); q != ncclSuccess)
        r = q;
    }
    if (s.comm != nullptr) {
      if (r == ncclSuccess)
        ncclCommDestroy(s.comm);
      else
        ncclCommAbort(s.comm);
      s.comm = nullptr;
    }
  }
  for (cudaEvent_t e : s.queued)
    cudaEventDestroy(e);
  for (cudaEvent_t e : s.spare)
    cudaEventDestroy(e);
  s.queued.clear();
  s.spare.clear();
}

void nccl_collective::raise_if_broken() {
  std::lock_guard lock{state_->mutex};
  if (state_->watchdog.aborted())
    throw state_->broken_locked();
}

void nccl_collective::abort(const std::string& reason) {
  std::lock_guard lock{state_->mutex};
  state_->request_abort_locked(reason);
}

std::function<void(const std::string&)> nccl_collective::abort_handle() {
  return [weak = std::weak_ptr<state>(state_)](const std::string& reason) {
    if (auto s = weak.lock()) {
      std::lock_guard lock{s->mutex};
      s->request_abort_locked(reason);
    }
  };
}

void nccl_collective::all_reduce_sum(const tensor& t) {
  ACTORLLM_CHECK(t.where() == be_.where(), "nccl all_reduce_sum: the tensor must be on the communicator's GPU");
  const ncclDataType_t type = nccl_type(t.type, "nccl all_reduce_sum");
  if (t.numel() == 0)
    return;  // one rank still runs NCCL's identity all-reduce: the same path as many, checkable on one GPU
  void* data = t.data();
  const auto count = static_cast<size_t>(t.numel());
  queue_operation(*state_, be_.stream(), "ncclAllReduce",
                  [&](ncclComm_t c) { return ncclAllReduce(data, data, count, type, ncclSum, c, be_.stream()); });
}

void nccl_collective::all_gather(const tensor& in, const tensor& out) {
  ACTORLLM_CHECK(in.where() == be_.where() && out.where() == be_.where(),
                 "nccl all_gather: the tensors must be on the communicator's GPU");
  ACTORLLM_CHECK(in.type == out.type, "nccl all_gather: the tensors must have one dtype");
  ACTORLLM_CHECK(out.numel() == in.numel() * size_, "all_gather: the output must hold size() inputs");
  const ncclDataType_t type = nccl_type(in.type, "nccl all_gather");
  if (in.numel() == 0)
    return;
  const void* src = in.data();
  void* dst = out.data();
  const auto count = static_cast<size_t>(in.numel());
  queue_operation(*state_, be_.stream(), "ncclAllGather",
                  [&](ncclComm_t c) { return ncclAllGather(src, dst, count, type, c, be_.stream()); });
}

tensor nccl_collective::staging(tensor& slot, int64_t n_floats) {
  if (slot.empty() || slot.numel() < n_floats)
    slot = be_.alloc(dtype::f32, {std::max<int64_t>(n_floats, 1)});
  return slot.reshape({slot.numel()}).slice_rows(0, n_floats);
}

void nccl_collective::all_reduce_sum(float* data, int64_t n) {
  if (n == 0)
    return;
  const tensor buf = staging(stage_in_, n);
  be_.upload(buf, data, static_cast<size_t>(n) * sizeof(float));
  all_reduce_sum(buf);
  be_.download(buf, data, static_cast<size_t>(n) * sizeof(float));  // waits for the stream; after an abort it returns
  raise_if_broken();
}

void nccl_collective::all_gather(const float* in, int64_t n_per_rank, float* out) {
  if (n_per_rank == 0)
    return;
  const tensor src = staging(stage_in_, n_per_rank);
  const tensor dst = staging(stage_out_, n_per_rank * size_);
  be_.upload(src, in, static_cast<size_t>(n_per_rank) * sizeof(float));
  all_gather(src, dst);
  be_.download(dst, out, static_cast<size_t>(n_per_rank * size_) * sizeof(float));
  raise_if_broken();
}

void nccl_collective::send(const tensor& t, int peer) {
  ACTORLLM_CHECK(t.where() == be_.where(), "nccl send: the tensor must be on the communicator's GPU");
  ACTORLLM_CHECK(peer >= 0 && peer < size_ && peer != rank_, "nccl send: the peer must be another rank");
  const ncclDataType_t type = nccl_type(t.type, "nccl send");
  const void* data = t.data();
  const auto count = static_cast<size_t>(t.numel());
  queue_operation(*state_, be_.stream(), "ncclSend",
                  [&](ncclComm_t c) { return ncclSend(data, count, type, peer, c, be_.stream()); });
}

void nccl_collective::recv(const tensor& t, int peer) {
  ACTORLLM_CHECK(t.where() == be_.where(), "nccl recv: the tensor must be on the communicator's GPU");
  ACTORLLM_CHECK(peer >= 0 && peer < size_ && peer != rank_, "nccl recv: the peer must be another rank");
  const ncclDataType_t type = nccl_type(t.type, "nccl recv");
  void* data = t.data();
  const auto count = static_cast<size_t>(t.numel());
  queue_operation(*state_, be_.stream(), "ncclRecv",
                  [&](ncclComm_t c) { return ncclRecv(data, count, type, peer, c, be_.stream()); });
}

std::vector<int64_t> nccl_collective::all_to_all_rows(const float* send_data, std::span<const int64_t> send_rows,
                                                      int64_t width, std::vector<float>& recv_out) {
  const int n = size_;
  ACTORLLM_CHECK(static_cast<int>(send_rows.size()) == n, "all_to_all_rows: one send count per rank");
  ACTORLLM_CHECK(width > 0, "all_to_all_rows: rows must have a width");
  const auto un = static_cast<size_t>(n);
  // Every rank's counts first (floats carry counts below 2^24 exactly), so each knows what it receives from whom.
  std::vector<float> mine(un), counts(un * un);
  int64_t n_send = 0;
  for (size_t d = 0; d < un; ++d) {
    ACTORLLM_CHECK(send_rows[d] >= 0 && send_rows[d] < (int64_t{1} << 24), "all_to_all_rows: bad row count");
    mine[d] = static_cast<float>(send_rows[d]);
    n_send += send_rows[d];
  }
  all_gather(mine.data(), n, counts.data());
  std::vector<int64_t> from(un);
  int64_t n_recv = 0;
  for (size_t src = 0; src < un; ++src) {
    from[src] = static_cast<int64_t>(counts[src * un + static_cast<size_t>(rank_)]);
    n_recv += from[src];
  }
  recv_out.assign(static_cast<size_t>(n_recv * width), 0.0f);
  // What crosses between GPUs: the all-gathered counts (size() floats to and from each peer) and the rows to and from
  // other ranks; this rank's own rows are a device copy.
  const auto me = static_cast<size_t>(rank_);
  const uint64_t count_bytes = (un - 1) * un * sizeof(float);
  const auto row_bytes = static_cast<uint64_t>(width) * sizeof(float);
  exchange_stats_.exchanges += 1;
  exchange_stats_.rows_sent += static_cast<uint64_t>(n_send - send_rows[me]);
  exchange_stats_.rows_received += static_cast<uint64_t>(n_recv - from[me]);
  exchange_stats_.bytes_sent += count_bytes + static_cast<uint64_t>(n_send - send_rows[me]) * row_bytes;
  exchange_stats_.bytes_received += count_bytes + static_cast<uint64_t>(n_recv - from[me]) * row_bytes;
  if (n_send == 0 && n_recv == 0)
    return from;
  const tensor dsend = staging(stage_in_, n_send * width);
  const tensor drecv = staging(stage_out_, n_recv * width);
  be_.upload(dsend, send_data, static_cast<size_t>(n_send * width) * sizeof(float));
  auto* sbase = dsend.data_as<float>();
  auto* rbase = drecv.data_as<float>();
  cudaStream_t stream = be_.stream();
  // This rank's own rows are a device copy; the others one grouped set of sends and receives (a group lets NCCL
  // pair them without a send waiting for a receive posted after it).
  int64_t self_send_offset = 0, self_recv_offset = 0;
  for (int d = 0; d < rank_; ++d) {
    self_send_offset += send_rows[static_cast<size_t>(d)];
    self_recv_offset += from[static_cast<size_t>(d)];
  }
  const int64_t self_rows = send_rows[static_cast<size_t>(rank_)];
  if (self_rows > 0) {
    ACTORLLM_CUDA_CHECK(cudaSetDevice(state_->device));
    ACTORLLM_CUDA_CHECK(cudaMemcpyAsync(rbase + self_recv_offset * width, sbase + self_send_offset * width,
                                        static_cast<size_t>(self_rows * width) * sizeof(float),
                                        cudaMemcpyDeviceToDevice, stream));
  }
  queue_operation(*state_, stream, "ncclSend/ncclRecv (all_to_all_rows)", [&](ncclComm_t c) {
    ncclResult_t r = ncclGroupStart();
    int64_t send_offset = 0, recv_offset = 0;
    for (int peer = 0; peer < n && (r == ncclSuccess || r == ncclInProgress); ++peer) {
      const auto p = static_cast<size_t>(peer);
      if (peer != rank_ && send_rows[p] > 0)
        r = ncclSend(sbase + send_offset * width, static_cast<size_t>(send_rows[p] * width), ncclFloat32, peer, c,
                     stream);
      if (peer != rank_ && from[p] > 0 && (r == ncclSuccess || r == ncclInProgress))
        r = ncclRecv(rbase + recv_offset * width, static_cast<size_t>(from[p] * width), ncclFloat32, peer, c, stream);
      send_offset += send_rows[p];
      recv_offset += from[p];
    }
    const ncclResult_t end = ncclGroupEnd();  // always closes the group, even after a failed call inside it
    return r == ncclSuccess ? end : r;
  });
  if (n_recv > 0)
    be_.download(drecv, recv_out.data(), static_cast<size_t>(n_recv * width) * sizeof(float));
  else
    be_.synchronize();
  raise_if_broken();
  return from;
}

}  // namespace actorllm::cuda
